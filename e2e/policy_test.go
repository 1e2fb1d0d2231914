package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// policyCLI runs `stockade policy ...` against the world's gateway.
func (w *world) policyCLI(args ...string) (string, string, int) {
	w.t.Helper()
	return runCmd(w.t, exec.Command(bin, append(append([]string{"policy"}, args...), "--state-dir", w.state, "--gateway", w.addr)...))
}

// TestPolicySetHotReload: `policy set` makes a new version live in a
// running sandbox (a denied host becomes allowed without a restart, the
// audit names the version), keeps the old one for `policy get --rev`,
// refuses a broken file with line:col, and survives a supervisor kill and
// a gateway restart.
func TestPolicySetHotReload(t *testing.T) {
	w := newWorld(t, 0)
	w.create("pol", `exec sleep 1000`)
	curlOther := fmt.Sprintf(`curl -s -m 5 -o /dev/null -w '%%{http_code}' http://other.test:%d/`, w.webPort)
	if out, _, _ := w.execIn("pol", curlOther); out != "403" {
		t.Fatalf("other.test before the reload: %q, want 403", out)
	}
	v2 := filepath.Join(filepath.Dir(w.policy), "policy-v2.yaml")
	orig, err := os.ReadFile(w.policy)
	if err != nil {
		t.Fatal(err)
	}
	write(t, v2, strings.Replace(string(orig), "host: api.test", "host: other.test", 1))
	out, errOut, code := w.policyCLI("set", "pol", v2)
	if code != 0 || !strings.Contains(out, "policy version 2 live") {
		t.Fatalf("policy set: exit %d %q %q", code, out, errOut)
	}
	if out, _, _ := w.execIn("pol", curlOther); out != "200" {
		t.Fatalf("other.test after the reload: %q, want 200", out)
	}
	// Allowed decisions are group-committed (10 ms): poll.
	testenv.Eventually(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(sandboxLog(w.state, "pol", contract.AuditLog))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `"hostname":"other.test"`) && strings.Contains(l, `"Allowed"`) && strings.Contains(l, `"version":2`) {
				return !strings.Contains(l, "e2e.test") // ancestors end at the sandbox's init
			}
		}
		return false
	}, "an audited allowed other.test under policy version 2, with no host process among its ancestors")
	// A broken file: exit 2 with its position; version 2 stays.
	bad := filepath.Join(filepath.Dir(w.policy), "bad.yaml")
	write(t, bad, "version: 1\nnetwork_policies:\n  x:\n    endpoints: [{ host: a.test, port: 0 }]\n")
	if _, errOut, code := w.policyCLI("set", "pol", bad); code != 2 || !strings.Contains(errOut, "bad.yaml:4:") {
		t.Fatalf("broken policy: exit %d %q", code, errOut)
	}
	if out, _, code := w.policyCLI("get", "pol", "--rev", "1"); code != 0 || !strings.Contains(out, "policy version 1") || !strings.Contains(out, "host: api.test") {
		t.Fatalf("get --rev 1: exit %d %q", code, out)
	}
	if _, errOut, code := w.policyCLI("get", "pol", "--rev", "9"); code != 3 || !strings.Contains(errOut, "kept: 1, 2") {
		t.Fatalf("get --rev 9: exit %d %q", code, errOut)
	}
	// The version survives a new supervisor and a new gateway.
	s, _ := w.get("pol")
	_ = syscall.Kill(s.SupervisorPid, syscall.SIGKILL)
	w.waitPhase("pol", "Ready", 30*time.Second, func(n status) bool { return n.SupervisorPid != s.SupervisorPid })
	w.killGateway()
	w.startGateway()
	w.waitPhase("pol", "Ready", 30*time.Second, nil)
	if out, _, _ := w.execIn("pol", curlOther); out != "200" {
		t.Fatalf("other.test after a supervisor kill and a gateway restart: %q, want 200", out)
	}
	if out, _, code := w.policyCLI("get", "pol"); code != 0 || !strings.Contains(out, "policy version 2") {
		t.Fatalf("get: exit %d %q", code, out)
	}
}
