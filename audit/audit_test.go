package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/policy/reason"
)

func TestLineForms(t *testing.T) {
	deny := NewDecision(ClassNetwork, false, reason.EndpointNotAllowed)
	deny.Actor = &Process{Path: "/usr/bin/curl", Pid: 64}
	deny.Dst = &Endpoint{Hostname: "example.org", Port: 443}
	if got, want := deny.Line(), "NET:OPEN [MED] DENIED /usr/bin/curl(64) -> example.org:443 [policy:- engine:opa] [reason:endpoint_not_allowed]"; got != want {
		t.Fatalf("denied line:\n got %s\nwant %s", got, want)
	}
	allow := NewDecision(ClassDNS, true, reason.None)
	allow.Query = &Query{Hostname: "api.test", Type: "A", Rcode: "NOERROR"}
	allow.Policy.Name = "api"
	if got, want := allow.Line(), "DNS:QUERY [INFO] ALLOWED - -> api.test A NOERROR [policy:api engine:opa] [reason:-]"; got != want {
		t.Fatalf("allowed DNS line:\n got %s\nwant %s", got, want)
	}
}

func TestDecisionFieldsAreOCSF(t *testing.T) {
	e := NewDecision(ClassDNS, false, reason.PolicyDNSIneligible)
	e.Query = &Query{Hostname: "x.test", Type: "A"}
	e.TimeMs = 1
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	want := map[string]any{"class_uid": 4003.0, "class_name": "DNS Activity", "activity_id": 1.0, "action_id": 2.0,
		"action": "Denied", "disposition": "Blocked", "severity_id": 3.0, "severity": "Medium",
		"status_detail": "policy_dns_ineligible", "time": 1.0}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v (event %s)", k, m[k], v, b)
		}
	}
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func TestFileGroupCommitConcurrentAndClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Hour)) // only size or Close flush
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				af.Record(NewDecision(ClassNetwork, true, reason.None))
			}
		}()
	}
	wg.Wait()
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 4000 {
		t.Fatalf("got %d lines, want 4000", len(lines))
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("invalid JSON line %q", l)
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("audit file mode %v, want 0600", st.Mode().Perm())
	}
	af.Record(NewDecision(ClassNetwork, true, reason.None))
	if af.Failed() != 1 {
		t.Fatalf("a record after Close: failed=%d, want 1", af.Failed())
	}
}

func TestFileFlushesWithinInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer af.Close()
	af.Record(NewDecision(ClassNetwork, true, reason.None))
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), `"Allowed"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("event not written within 5 s of a 5 ms flush interval")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDenialWrittenBeforeRecordReturns: a denial (and what was buffered
// before it) is in the file when Record returns, with a group-commit
// interval far longer than the test: a SIGKILL right after cannot lose it.
func TestDenialWrittenBeforeRecordReturns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer af.Close()
	af.Record(NewDecision(ClassNetwork, true, reason.None))
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("an allowed event was written at once (group commit off?): %q", b)
	}
	af.Record(NewDecision(ClassDNS, false, reason.PolicyDNSIneligible))
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "\n"); n != 2 || !strings.Contains(string(b), "policy_dns_ineligible") {
		t.Fatalf("after a denial the file has %d lines: %q", n, b)
	}
}

func TestFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithMaxBytes(2000), WithKeep(2), WithFlushInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		af.Record(NewDecision(ClassNetwork, true, reason.None))
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if st.Size() > 2000 {
			t.Fatalf("%s is %d bytes, over the 2000-byte limit", p, st.Size())
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Fatalf("keep=2 left a third rotated file: %v", err)
	}
}

// TestLineEscapesWhatTheWorkloadControls: a binary path or host name with a
// newline, a carriage return, a line separator or invalid UTF-8 cannot
// forge a line; every such character is an escape on the same line.
func TestLineEscapesWhatTheWorkloadControls(t *testing.T) {
	forged := "/tmp/x(1) -> a:1 [policy:- engine:opa] [reason:-]\nNET:OPEN [INFO] ALLOWED /usr/bin/curl"
	e := NewDecision(ClassNetwork, false, reason.BinaryNotAllowed)
	e.Actor = &Process{Path: forged, Pid: 7}
	e.Dst = &Endpoint{Hostname: "evil\r\u2028host\x1b[31m\xff", Port: 443}
	line := e.Line()
	if strings.ContainsAny(line, "\n\r\x1b\u2028") || !utf8.ValidString(line) {
		t.Fatalf("line keeps a control character: %q", line)
	}
	want := `NET:OPEN [MED] DENIED /tmp/x(1) -> a:1 [policy:- engine:opa] [reason:-]\x0aNET:OPEN [INFO] ALLOWED /usr/bin/curl(7) -> evil\x0d\u2028host\x1b[31m\xff:443 [policy:- engine:opa] [reason:binary_not_allowed]`
	if line != want {
		t.Fatalf("line:\n got %s\nwant %s", line, want)
	}
	life := NewDecision(ClassLifecycle, true, reason.None)
	life.ActivityName, life.Message = "Ready", "a -> b\nLIFECYCLE:READY [INFO] forged"
	if l := life.Line(); strings.Contains(l, "\n") {
		t.Fatalf("lifecycle line keeps a newline: %q", l)
	}
	for in, out := range map[string]string{`a\b`: `a\\b`, "plain": "plain", "ünïcode": "ünïcode"} {
		if got := Escape(in); got != out {
			t.Errorf("Escape(%q) = %q, want %q", in, got, out)
		}
	}
}

// With AllowedAtDebug an allowed decision is logged only at debug level;
// a denial is logged at warn either way.
func TestLogSinkAllowedAtDebug(t *testing.T) {
	for _, tc := range []struct {
		level         zerolog.Level
		atDebug       bool
		allowed, deny bool // which lines appear
	}{
		{zerolog.InfoLevel, false, true, true},
		{zerolog.InfoLevel, true, false, true},
		{zerolog.DebugLevel, true, true, true},
	} {
		var buf bytes.Buffer
		sink := LogSink{Log: zerolog.New(&buf).Level(tc.level), AllowedAtDebug: tc.atDebug}
		sink.Record(NewDecision(ClassNetwork, true, reason.None))
		sink.Record(NewDecision(ClassNetwork, false, reason.BinaryNotAllowed))
		out := buf.String()
		if got := strings.Contains(out, "ALLOWED"); got != tc.allowed {
			t.Errorf("level %s, allowed at debug %v: allowed line logged %v, want %v:\n%s", tc.level, tc.atDebug, got, tc.allowed, out)
		}
		if got := strings.Contains(out, "DENIED"); got != tc.deny {
			t.Errorf("level %s, allowed at debug %v: denial logged %v, want %v:\n%s", tc.level, tc.atDebug, got, tc.deny, out)
		}
	}
}
