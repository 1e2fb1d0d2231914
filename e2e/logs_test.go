package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// elsewhere is a client on "another host": only a credential issued by the
// gateway's operator, an empty HOME and an empty state dir; no
// STOCKADE_* variables. Whatever it shows came from the gateway.
type elsewhere struct {
	t      *testing.T
	config string
	home   string
	state  string
}

func newElsewhere(t *testing.T, w *world) *elsewhere {
	t.Helper()
	e := &elsewhere{t: t, config: filepath.Join(t.TempDir(), "eve.config"), home: t.TempDir(), state: t.TempDir()}
	cmd := exec.Command(bin, "client", "issue", "eve", "--role", "viewer", "--out", e.config, "--state-dir", w.state, "--gateway", w.addr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("client issue: %v\n%s", err, out)
	}
	return e
}

// command is `stockade sandbox --config ... --state-dir EMPTY args...`.
func (e *elsewhere) command(args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"sandbox", "--config", e.config, "--state-dir", e.state}, args...)...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "STOCKADE_") && !strings.HasPrefix(k, "XDG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+e.home)
	return cmd
}

// run runs a verb to its end: stdout, stderr, exit code.
func (e *elsewhere) run(args ...string) (string, string, int) {
	e.t.Helper()
	return runCmd(e.t, e.command(args...))
}

// lines splits output into its lines.
func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// indexOf is the index of the first line containing sub, or -1.
func indexOf(ls []string, sub string) int {
	for i, l := range ls {
		if strings.Contains(l, sub) {
			return i
		}
	}
	return -1
}

// follower is a running `logs -f`: its lines as they come.
type follower struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	got  []string
	errb bytes.Buffer
	done chan error
}

func (e *elsewhere) follow(args ...string) *follower {
	e.t.Helper()
	f := &follower{cmd: e.command(append([]string{"logs"}, args...)...), done: make(chan error, 1)}
	f.cmd.Stderr = &f.errb
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = f.cmd.Process.Kill()
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.mu.Lock()
			f.got = append(f.got, sc.Text())
			f.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		f.done <- f.cmd.Wait()
	}()
	return f
}

func (f *follower) lines() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// waitLine waits for a line containing sub.
func (f *follower) waitLine(t *testing.T, sub string, d time.Duration) {
	t.Helper()
	testenv.Eventually(t, d, func() bool { return indexOf(f.lines(), sub) >= 0 }, "logs -f to print %q (got %q, stderr %q)", sub, f.lines(), &f.errb)
}

// stamp is the time a text line starts with (today: no date).
var stamp = regexp.MustCompile(`^\d{2}:\d{2}:\d{2}\.\d{3} `)

// TestLogsFromAnotherHost is `sandbox logs` through the gateway for a
// client that holds only a credential: workload stdout and stderr apart
// and in order, a boundary decision, -o json, -n, --timestamps, -f
// getting a line written after it started and ending when the sandbox is
// deleted, and a sandbox created again under the same name showing only
// its own lines.
func TestLogsFromAnotherHost(t *testing.T) {
	w := newWorld(t, 0)
	eve := newElsewhere(t, w)
	// stdout and stderr are two pipes: lines of both within about a
	// millisecond have no order (as with any runtime that keeps them
	// apart); 100 ms apart they must be in order.
	script := fmt.Sprintf(`
echo first-out
sleep 0.1
echo first-err >&2
sleep 0.1
echo second-out
curl -sS -m 5 -o /dev/null -w '%%{http_code}\n' http://other.test:%d/ > /sandbox/denied 2>&1
while true; do
  if [ -f /sandbox/say ]; then echo "said $(cat /sandbox/say)"; mv /sandbox/say /sandbox/said; fi
  sleep 0.2
done`, w.webPort)
	s := w.create("talk", script)
	if got := strings.TrimSpace(w.file(s, "denied")); got != "403" {
		t.Fatalf("the denied request answered %q", got)
	}
	uid1 := getUID(t, w, "talk")

	// The workload's output, labelled by stream, in order, each line timed.
	var out string
	testenv.Eventually(t, 10*time.Second, func() bool {
		var code int
		out, _, code = eve.run("logs", "talk")
		return code == 0 && strings.Contains(out, "second-out") && strings.Contains(out, "DENIED")
	}, "logs to show the workload's output and the denial")
	ls := lines(out)
	o1, e1, o2 := indexOf(ls, "out: first-out"), indexOf(ls, "err: first-err"), indexOf(ls, "out: second-out")
	if o1 < 0 || e1 < 0 || o2 < 0 || !(o1 < e1 && e1 < o2) {
		t.Fatalf("want out: first-out, err: first-err, out: second-out in that order:\n%s", out)
	}
	for _, l := range ls {
		if !stamp.MatchString(l) {
			t.Fatalf("line without its time: %q", l)
		}
	}
	if indexOf(ls, "LIFECYCLE:") < 0 {
		t.Fatalf("no lifecycle event:\n%s", out)
	}

	// --audit: the boundary's decision (and the lifecycle), no output.
	aud, _, code := eve.run("logs", "talk", "--audit")
	if code != 0 || !strings.Contains(aud, "DENIED") || !strings.Contains(aud, "other.test") || !strings.Contains(aud, "[reason:endpoint_not_allowed]") ||
		strings.Contains(aud, "out: ") || strings.Contains(aud, "err: ") {
		t.Fatalf("logs --audit (exit %d):\n%s", code, aud)
	}

	// -o json: one object per line.
	js, _, code := eve.run("logs", "talk", "-o", "json")
	if code != 0 {
		t.Fatalf("-o json: exit %d", code)
	}
	var sawErr, sawAudit bool
	for _, l := range lines(js) {
		var e struct {
			Time   string         `json:"time"`
			Source string         `json:"source"`
			Stream string         `json:"stream"`
			Text   string         `json:"text"`
			Event  map[string]any `json:"event"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("-o json line %q: %v", l, err)
		}
		if _, err := time.Parse(time.RFC3339, e.Time); err != nil {
			t.Fatalf("-o json time %q: %v", e.Time, err)
		}
		sawErr = sawErr || (e.Source == "workload" && e.Stream == "err" && e.Text == "first-err")
		sawAudit = sawAudit || (e.Source == "audit" && e.Event["class_uid"] != nil && strings.Contains(e.Text, "DENIED"))
	}
	if !sawErr || !sawAudit {
		t.Fatalf("-o json lacks the stderr line or the audit event:\n%s", js)
	}

	// -n 3: exactly three lines, the last of the merged result.
	tail, _, code := eve.run("logs", "talk", "-n", "3")
	if got := lines(tail); code != 0 || len(got) != 3 {
		t.Fatalf("-n 3 (exit %d): %d lines:\n%s", code, len(got), tail)
	}
	// --timestamps: the full date and zone.
	full, _, _ := eve.run("logs", "talk", "-n", "1", "--timestamps")
	if !regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(Z|[+-]\d{2}:\d{2}) `).MatchString(full) {
		t.Fatalf("--timestamps: %q", full)
	}

	// -f: a line written after the follow started arrives.
	f := eve.follow("talk", "-f")
	f.waitLine(t, "out: second-out", 15*time.Second)
	token := fmt.Sprintf("token-%d", time.Now().UnixNano())
	if err := os.WriteFile(filepath.Join(s.Workspace, "say"), []byte(token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitLine(t, "out: said "+token, 15*time.Second)

	// A follower that dies without a word (SIGKILL): the gateway ends its
	// stream when the connection to it ends (else after 30 s without an
	// acknowledgement), not never.
	killed := eve.follow("talk", "-f")
	killed.waitLine(t, "out: second-out", 15*time.Second)
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 40*time.Second, func() bool {
		return strings.Contains(w.gwLog.String(), `"why":"the connection to the client ended"`) ||
			strings.Contains(w.gwLog.String(), `"why":"no acknowledgement for`)
	}, "the gateway to end the stream of a killed client")

	// Deleting the sandbox ends the follow (exit 0, saying so).
	if out, errOut, code := w.cli("delete", "talk"); code != 0 {
		t.Fatalf("delete: exit %d\n%s%s", code, out, errOut)
	}
	select {
	case err := <-f.done:
		if err != nil || !strings.Contains(f.errb.String(), "was deleted") {
			t.Fatalf("logs -f after delete: %v, stderr %q", err, f.errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("logs -f still runs after the delete (stderr %q)", f.errb.String())
	}
	testenv.Eventually(t, 20*time.Second, func() bool { _, code := w.get("talk"); return code == 3 }, "talk to be gone")
	if _, errOut, code := eve.run("logs", "talk"); code != 3 {
		t.Fatalf("logs of a deleted sandbox: exit %d %s, want 3", code, errOut)
	}

	// Created again under the same name: only its own lines.
	s2 := w.create("talk", `echo reborn-out; echo reborn-err >&2; exec sleep 1000`)
	if uid2 := getUID(t, w, "talk"); uid2 == uid1 || uid2 == "" {
		t.Fatalf("uid %q after recreate, first %q", uid2, uid1)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		out, _, code = eve.run("logs", "talk")
		return code == 0 && strings.Contains(out, "err: reborn-err")
	}, "logs of the new talk")
	for _, old := range []string{"first-out", "first-err", "second-out", "said", "DENIED"} {
		if strings.Contains(out, old) {
			t.Fatalf("the new sandbox shows the old one's %q:\n%s", old, out)
		}
	}
	_ = s2
}

// TestLogsErrors: no such sandbox is exit 3, bad flags exit 2, no gateway
// exit 5.
func TestLogsErrors(t *testing.T) {
	w := newWorld(t, 0)
	eve := newElsewhere(t, w)
	if _, errOut, code := eve.run("logs", "nope"); code != 3 || !strings.Contains(errOut, "nope") {
		t.Fatalf("logs of no sandbox: exit %d %q, want 3", code, errOut)
	}
	if _, errOut, code := eve.run("logs", "nope", "-o", "yaml"); code != 2 {
		t.Fatalf("-o yaml: exit %d %q, want 2", code, errOut)
	}
	if _, errOut, code := eve.run("logs", "nope", "--gateway", "127.0.0.1:1"); code != 5 {
		t.Fatalf("no gateway: exit %d %q, want 5", code, errOut)
	}
}

// getUID is `sandbox get -o json`'s uid.
func getUID(t *testing.T, w *world, name string) string {
	t.Helper()
	out, errOut, code := w.cli("get", name, "-o", "json")
	if code != 0 {
		t.Fatalf("get %s: exit %d %s", name, code, errOut)
	}
	var v struct {
		UID string `json:"uid"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v.UID
}
