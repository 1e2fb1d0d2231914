package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// neverRecovered reports whether the sandbox went through Recovering (an
// automatic retry) at any point of its history.
func neverRecovered(s status) bool {
	for _, tr := range s.Transitions {
		if tr.To == "Recovering" {
			return false
		}
	}
	return true
}

// TestFailFast (issue 12): what cannot heal is not retried, and a policy
// without filesystem_policy still runs a shell.
//   - create with a missing binary ends, in under 2 s, in
//     Error/StartFailed naming the path and what works from there;
//     nothing is retried afterwards;
//   - a hard_requirement path that does not exist: the same, naming it;
//   - a network-only policy (no filesystem_policy) runs sh -c 'echo ok'
//     (the baseline), seen in `sandbox logs`;
//   - --restart never with a start failure that might heal (the gateway's
//     supervisor.start fault): Error/StartFailed, no retry;
//   - a policy allowing 127.0.0.1:PORT: curl to it goes through the
//     boundary (NO_PROXY leaves 127.0.0.1 out) and is audited.
func TestFailFast(t *testing.T) {
	w := newWorld(t, 0, "--chaos")
	dir := sharedDir(t, 0)

	t.Run("missing binary", func(t *testing.T) {
		began := time.Now()
		out, errOut, code := w.cli("create", "nobin", "--policy", w.policy, "--", "/no/such/bin")
		took := time.Since(began)
		if code == 0 {
			t.Fatalf("create with a missing binary exited 0:\n%s%s", out, errOut)
		}
		s, _ := w.get("nobin")
		if s.Phase != "Error" || s.Reason != "StartFailed" || !strings.Contains(s.Message, "the command /no/such/bin does not exist in the sandbox") ||
			!strings.Contains(s.Message, "use start or recover") || s.RecoveryAttempts != 0 {
			t.Fatalf("after create: %s/%s attempts %d %q\n(create: exit %d, %s%s)", s.Phase, s.Reason, s.RecoveryAttempts, s.Message, code, out, errOut)
		}
		if took > 2*time.Second {
			t.Errorf("create took %s to fail, want under 2 s", took)
		}
		if !strings.Contains(out+errOut, "/no/such/bin") {
			t.Errorf("create's output does not name the path:\n%s%s", out, errOut)
		}
		t.Logf("create took %s; message: %s", took.Round(time.Millisecond), s.Message)
		time.Sleep(1500 * time.Millisecond) // a retry would have come by now (first backoff 0.2 s)
		if s, _ = w.get("nobin"); s.Phase != "Error" || !neverRecovered(s) {
			t.Fatalf("retried: %s/%s %+v", s.Phase, s.Reason, s.Transitions)
		}
		// The verbs the message names work: start tries again (and fails the same way).
		if out, errOut, code := w.cli("start", "nobin", "--no-wait"); code != 0 {
			t.Fatalf("start from Error/StartFailed: exit %d %s%s", code, out, errOut)
		}
		w.waitPhase("nobin", "Error", 10*time.Second, func(s status) bool { return len(s.Transitions) >= 4 })
	})

	t.Run("hard_requirement path", func(t *testing.T) {
		bad := filepath.Join(dir, "hard.yaml")
		write(t, bad, `version: 1
filesystem_policy:
  read_only: [/usr, /nonexistent-stockade-path]
landlock:
  compatibility: hard_requirement
`)
		if _, _, code := w.cli("create", "hard", "--policy", bad, "--", "/bin/true"); code == 0 {
			t.Fatal("create with a missing hard_requirement path exited 0")
		}
		s, _ := w.get("hard")
		if s.Phase != "Error" || s.Reason != "StartFailed" || !strings.Contains(s.Message, "read_only /nonexistent-stockade-path") ||
			!strings.Contains(s.Message, "best_effort") || !neverRecovered(s) {
			t.Fatalf("after create: %s/%s %q %+v", s.Phase, s.Reason, s.Message, s.Transitions)
		}
	})

	t.Run("network-only policy", func(t *testing.T) {
		netOnly := filepath.Join(dir, "net.yaml")
		write(t, netOnly, fmt.Sprintf(`version: 1
network_policies:
  api:
    name: api
    endpoints: [{ host: api.test, port: %d }]
    binaries: [{ path: /usr/bin/curl }]
`, w.webPort))
		out, errOut, code := w.cli("create", "netonly", "--policy", netOnly, "--", "/bin/sh", "-c", "echo ok")
		if code != 0 {
			t.Fatalf("create with a network-only policy: exit %d\n%s%s", code, out, errOut)
		}
		w.waitPhase("netonly", "Completed", 15*time.Second, nil)
		logs, errOut, code := w.cli("logs", "netonly")
		if code != 0 || !strings.Contains(logs, "ok") {
			t.Fatalf("logs: exit %d %q %s", code, logs, errOut)
		}
	})

	t.Run("restart never", func(t *testing.T) {
		if out, errOut, code := w.cli("fault", "--gateway", "supervisor.start=error:1"); code != 0 {
			t.Fatalf("arm supervisor.start: exit %d %s%s", code, out, errOut)
		}
		if _, _, code := w.cli("create", "never", "--policy", w.policy, "--restart", "never", "--", "/bin/sh", "-c", "sleep 60"); code == 0 {
			t.Fatal("create with a failing start and --restart never exited 0")
		}
		s, _ := w.get("never")
		if s.Phase != "Error" || s.Reason != "StartFailed" || !strings.Contains(s.Message, "restart: never") {
			t.Fatalf("after create: %s/%s %q", s.Phase, s.Reason, s.Message)
		}
		time.Sleep(1500 * time.Millisecond)
		if s, _ = w.get("never"); s.Phase != "Error" || !neverRecovered(s) {
			t.Fatalf("restart never retried: %s/%s %+v", s.Phase, s.Reason, s.Transitions)
		}
		// The fault is spent: start works.
		if out, errOut, code := w.cli("start", "never", "--no-wait"); code != 0 {
			t.Fatalf("start: exit %d %s%s", code, out, errOut)
		}
		w.waitPhase("never", "Ready", 15*time.Second, nil)
	})

	t.Run("loopback upstream", func(t *testing.T) {
		lo := filepath.Join(dir, "loopback.yaml")
		write(t, lo, fmt.Sprintf(`version: 1
network_policies:
  local:
    name: local
    endpoints: [{ host: 127.0.0.1, port: %d }]
    binaries: [{ path: /usr/bin/curl }]
`, w.webPort))
		script := fmt.Sprintf(`echo "$NO_PROXY" > /sandbox/noproxy; curl -s -m 5 http://127.0.0.1:%d/ > /sandbox/out; echo >> /sandbox/out; sleep 60`, w.webPort)
		args := []string{"create", "lo", "--policy", lo, "--", "/bin/sh", "-c", script}
		if out, errOut, code := w.cli(args...); code != 0 {
			t.Fatalf("create: exit %d %s%s", code, out, errOut)
		}
		s, _ := w.get("lo")
		if got := strings.TrimSpace(w.file(s, "noproxy")); got != "localhost" {
			t.Errorf("NO_PROXY %q, want localhost (127.0.0.1 through the boundary)", got)
		}
		if got := w.file(s, "out"); !strings.Contains(got, "upstream says hi to 127.0.0.1") {
			t.Errorf("curl to the allowed loopback upstream: %q", got)
		}
		testAudit := func() bool {
			out, _, _ := w.cli("logs", "lo", "--audit")
			return strings.Contains(out, fmt.Sprintf("ALLOWED curl(1) -> 127.0.0.1:%d", w.webPort)) || strings.Contains(out, fmt.Sprintf("-> 127.0.0.1:%d", w.webPort))
		}
		deadline := time.Now().Add(10 * time.Second)
		for !testAudit() {
			if time.Now().After(deadline) {
				out, _, _ := w.cli("logs", "lo", "--audit")
				t.Fatalf("the loopback request is not audited:\n%s", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}
