package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ledger is what the clients saw: acknowledged files, denials, exec
// outcomes. The invariants compare it with the sandboxes' state and audit.
type ledger struct {
	mu    sync.Mutex
	files []ackedFile
	// denials counts client-observed denials per sandbox, per
	// "host|reason" (proxy) or "name|REFUSED" (DNS).
	denials map[string]map[string]int
	execs   execStats
	bad     []string // exec outcomes that broke the exec invariant
}

type ackedFile struct {
	sandbox, path, sha string
}

type execStats struct {
	Total      int `json:"total"`
	WithStatus int `json:"with_status"`
	ClearError int `json:"clear_error"`
	Bad        int `json:"bad"`
}

func newLedger() *ledger { return &ledger{denials: map[string]map[string]int{}} }

func (l *ledger) denial(sandbox, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.denials[sandbox] == nil {
		l.denials[sandbox] = map[string]int{}
	}
	l.denials[sandbox][key]++
}

// outcome classifies one exec: its own status, a clear error (exit 4 or 5
// with a message: not Ready, no gateway, stream cut before the status), or
// a broken invariant. excused says the exec overlapped a fault that can
// cut it (gateway or supervisor down); then a clear error is fine.
func (l *ledger) outcome(sandbox string, want int, r cliResult, excused bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.execs.Total++
	switch {
	case r.code == want:
		l.execs.WithStatus++
		return true
	case (r.code == 4 || r.code == 5) && strings.TrimSpace(r.err) != "" && excused:
		l.execs.ClearError++
		return false
	default:
		l.execs.Bad++
		if len(l.bad) < 50 {
			l.bad = append(l.bad, fmt.Sprintf("%s: exec at %s wanted exit %d, got %d after %s (killed by harness: %v): stderr %q stdout %q",
				sandbox, r.start.Format("15:04:05.000"), want, r.code, r.took.Round(time.Millisecond), r.killed, clip(r.err), clip(r.out)))
		}
		return false
	}
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// denial403 parses a proxy's 403 body and returns its reason.
func denial403(body string) (string, bool) {
	var d struct {
		Error  string `json:"error"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal([]byte(body), &d) != nil || d.Reason == "" {
		return "", false
	}
	return d.Reason, true
}

// workScript is one unit of steady work: write a file, an allowed request,
// a denied request to a unique host, a lookup of a unique unlisted name,
// then exit with a chosen status. Each step prints one tagged line.
func workScript(seq, port int, data string, exit int) string {
	return fmt.Sprintf(`mkdir -p /sandbox/w && printf '%%s' '%s' > /sandbox/w/f%d.tmp && mv /sandbox/w/f%d.tmp /sandbox/w/f%d && echo W
echo "A $(curl -s -m 10 -w ' %%{http_code}' http://api.test:%d/)"
echo "D $(curl -s -m 10 http://deny-%d.test:%d/)"
echo "N $(dig +tries=1 +time=8 unlisted-%d.example A | grep -o 'status: [A-Z]*')"
exit %d
`, data, seq, seq, seq, port, seq, port, seq, exit)
}

// record reads a work script's output into the ledger.
func (l *ledger) record(sandbox string, seq int, data string, r cliResult, statusOK bool) {
	for _, line := range strings.Split(r.out, "\n") {
		tag, rest, _ := strings.Cut(line, " ")
		switch tag {
		case "W":
			if statusOK {
				sum := sha256.Sum256([]byte(data))
				l.mu.Lock()
				l.files = append(l.files, ackedFile{sandbox, "w/f" + strconv.Itoa(seq), hex.EncodeToString(sum[:])})
				l.mu.Unlock()
			}
		case "A":
			if body, ok := strings.CutSuffix(rest, " 403"); ok {
				if why, ok := denial403(body); ok {
					l.denial(sandbox, "api.test|"+why)
				}
			}
		case "D":
			if why, ok := denial403(rest); ok {
				l.denial(sandbox, fmt.Sprintf("deny-%d.test|%s", seq, why))
			}
		case "N":
			if strings.Contains(rest, "REFUSED") {
				l.denial(sandbox, fmt.Sprintf("unlisted-%d.example|REFUSED", seq))
			}
		}
	}
}

// worker runs steady work in one sandbox until ctx ends.
type worker struct {
	w       *world
	l       *ledger
	sandbox string
	port    int
	seq     func() int
	// excused reports whether an exec spanning [from, to] may be cut by a
	// fault (gateway down, or a process-level fault on this sandbox).
	excused func(sandbox string, from, to time.Time) bool
}

func (k *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		seq := k.seq()
		data := fmt.Sprintf("%s-%d-%x", k.sandbox, seq, sha256.Sum256([]byte(strconv.Itoa(seq))))
		exit := []int{0, 1, 2, 3, 6, 7, 9}[seq%7]
		r := k.w.exec(context.WithoutCancel(ctx), k.sandbox, workScript(seq, k.port, data, exit))
		ok := k.l.outcome(k.sandbox, exit, r, k.excused(k.sandbox, r.start, r.start.Add(r.took)))
		k.l.record(k.sandbox, seq, data, r, ok)
		if !ok {
			// Not Ready or no gateway: do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
