package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestCreateBoundaryAndEscapes covers issue 3's end-to-end points 1 and 2:
// Ready; an allowed request through the proxy reaches the local upstream; a
// request to another name is denied and a name in no policy is REFUSED,
// both audited; the workload cannot reach the gateway's API port, connect
// anywhere directly, write outside read_write nor read outside the policy.
func TestCreateBoundaryAndEscapes(t *testing.T) { modes(t, testCreateBoundaryAndEscapes) }

func testCreateBoundaryAndEscapes(t *testing.T, w *world) {
	apiPort := w.addr[strings.LastIndexByte(w.addr, ':')+1:]
	script := fmt.Sprintf(`
curl -sS -m 5 http://api.test:%[1]d/x > /sandbox/allowed 2>&1; echo "rc=$?" >> /sandbox/allowed
curl -sS -m 5 -o /dev/null -w '%%{http_code}\n' http://other.test:%[1]d/ > /sandbox/denied 2>&1
getent hosts example.org > /sandbox/dns 2>&1; echo "rc=$?" >> /sandbox/dns
curl -sS -m 3 --noproxy '*' http://127.0.0.1:%[2]s/ > /sandbox/gateway 2>&1; echo "rc=$?" >> /sandbox/gateway
curl -sS -m 3 --noproxy "*" http://127.0.0.1:%[1]d/ > /sandbox/direct 2>&1; echo "rc=$?" >> /sandbox/direct
(echo x > /usr/stockade-escape) 2> /sandbox/write; echo "rc=$?" >> /sandbox/write
(ls /var) > /sandbox/read 2>&1; echo "rc=$?" >> /sandbox/read
(cat %[3]s/client.config %[3]s/pki/ca.key %[3]s/sandboxes/box/spec.json) > /sandbox/token 2>&1; echo "rc=$?" >> /sandbox/token
echo box-out; echo box-err >&2
echo done > /sandbox/done
exec sleep 1000`, w.webPort, apiPort, w.state)
	s := w.create("box", script)
	if s.WorkloadPid == 0 || s.SupervisorPid == 0 {
		t.Fatalf("Ready without pids: %+v", s)
	}
	w.file(s, "done")
	if got := w.file(s, "allowed"); !strings.Contains(got, "upstream says hi to api.test") || !strings.Contains(got, "rc=0") {
		t.Fatalf("allowed request: %q", got)
	}
	if got := w.file(s, "denied"); strings.TrimSpace(got) != "403" {
		t.Fatalf("request to other.test: %q, want 403", got)
	}
	if got := w.file(s, "dns"); strings.Contains(got, "rc=0") {
		t.Fatalf("getent example.org resolved: %q", got)
	}
	for _, f := range []string{"gateway", "direct", "write", "read", "token"} {
		if got := w.file(s, f); strings.Contains(got, "rc=0") {
			t.Errorf("escape %q succeeded from inside: %q", f, got)
		}
	}
	if _, err := os.Stat("/usr/stockade-escape"); err == nil {
		_ = os.Remove("/usr/stockade-escape")
		t.Fatal("the workload wrote /usr/stockade-escape on the host")
	}
	out, _, code := w.cli("logs", "box", "--audit")
	if code != 0 || !strings.Contains(out, "[reason:policy_dns_ineligible]") || !strings.Contains(out, "[reason:endpoint_not_allowed]") ||
		!strings.Contains(out, "ALLOWED /usr/bin/curl(") {
		t.Fatalf("logs --audit lacks the decisions:\n%s", out)
	}
	// The workload's output, through the sandbox's init (in its cgroup,
	// or none for an unprivileged gateway), reaches its log.
	testenv.Eventually(t, 10*time.Second, func() bool {
		out, _, _ = w.cli("logs", "box")
		return strings.Contains(out, "out: box-out") && strings.Contains(out, "err: box-err")
	}, "logs to show the workload's stdout and stderr")
}

// TestSupervisorKillRecovers is point 3: SIGKILL the supervisor ->
// Error/SupervisorLost -> Recovering -> Ready within 10 s; the workspace is
// intact.
func TestSupervisorKillRecovers(t *testing.T) { modes(t, testSupervisorKillRecovers) }

func testSupervisorKillRecovers(t *testing.T, w *world) {
	s := w.create("phoenix", `echo run; echo keep > /sandbox/before; exec sleep 1000`)
	w.file(s, "before")
	if err := syscall.Kill(s.SupervisorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := w.waitPhase("phoenix", "Ready", 10*time.Second, func(n status) bool { return n.SupervisorPid != s.SupervisorPid })
	t.Logf("Ready again after %s (supervisor %d -> %d)", time.Since(start).Round(time.Millisecond), s.SupervisorPid, r.SupervisorPid)
	var sawError, sawRecovering bool
	for _, tr := range r.Transitions {
		sawError = sawError || (tr.To == "Error" && tr.Reason == "SupervisorLost")
		sawRecovering = sawRecovering || tr.To == "Recovering"
	}
	if !sawError || !sawRecovering {
		t.Fatalf("transitions lack Error/SupervisorLost -> Recovering: %+v", r.Transitions)
	}
	if got := w.file(r, "before"); got != "keep\n" {
		t.Fatalf("workspace file after recovery: %q", got)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", s.WorkloadPid)); err == nil {
		t.Fatalf("the old workload %d outlived its supervisor", s.WorkloadPid)
	}
	// The new supervisor's init passes the new workload's output on to
	// the same log, after the first one's.
	testenv.Eventually(t, 10*time.Second, func() bool {
		out, _, _ := w.cli("logs", "phoenix")
		return strings.Count(out, "out: run") == 2
	}, "logs to show the output of both runs")
}

// TestGatewayRestartReadopts is point 4: SIGKILL the gateway and start it
// again: the sandbox is Ready with the same workload pid, and a sandbox
// created (acknowledged) just before the kill is there too.
func TestGatewayRestartReadopts(t *testing.T) { modes(t, testGatewayRestartReadopts) }

func testGatewayRestartReadopts(t *testing.T, w *world) {
	a := w.create("steady", `exec sleep 1000`)
	out, errOut, code := w.cli("create", "late", "--policy", w.policy, "--no-wait", "--", "/bin/sh", "-c", "exec sleep 1000")
	if code != 0 {
		t.Fatalf("create late: %d %s%s", code, out, errOut)
	}
	w.killGateway()
	w.startGateway()
	// The first list after the restart already has both (from the store
	// until their actors report).
	if out, errOut, code := w.cli("list", "-o", "json"); code != 0 || !strings.Contains(out, `"steady"`) || !strings.Contains(out, `"late"`) {
		t.Fatalf("list right after the restart: exit %d %s%s", code, out, errOut)
	}
	r := w.waitPhase("steady", "Ready", 30*time.Second, func(s status) bool { return s.RecoveryAttempts >= 0 })
	if r.WorkloadPid != a.WorkloadPid {
		t.Fatalf("workload pid %d after gateway restart, want the same %d", r.WorkloadPid, a.WorkloadPid)
	}
	w.waitPhase("late", "Ready", 30*time.Second, nil)
}

// TestVerbs is point 5: stop / start / delete / delete --keep-workspace,
// and refusals that name the phase and what would work.
func TestVerbs(t *testing.T) { modes(t, testVerbs) }

func testVerbs(t *testing.T, w *world) {
	s := w.create("verbs", `echo data > /sandbox/data; exec sleep 1000`)
	w.file(s, "data")
	if out, errOut, code := w.cli("stop", "verbs"); code != 0 {
		t.Fatalf("stop: %d %s%s", code, out, errOut)
	}
	w.waitPhase("verbs", "Stopped", 15*time.Second, nil)
	_, errOut, code := w.cli("recover", "verbs")
	if code != 4 || !strings.Contains(errOut, "Stopped") || !strings.Contains(errOut, "start") {
		t.Fatalf("recover from Stopped: exit %d %q; want 4 naming the phase and start", code, errOut)
	}
	if _, errOut, code := w.cli("start", "verbs"); code != 0 {
		t.Fatalf("start: %d %s", code, errOut)
	}
	r := w.waitPhase("verbs", "Ready", 15*time.Second, nil)
	if got := w.file(r, "data"); got != "data\n" {
		t.Fatalf("workspace after stop/start: %q", got)
	}
	_, errOut, code = w.cli("start", "verbs")
	if code != 4 || !strings.Contains(errOut, "Ready") {
		t.Fatalf("start from Ready: exit %d %q; want 4 naming Ready", code, errOut)
	}
	if _, errOut, code := w.cli("delete", "verbs", "--keep-workspace"); code != 0 {
		t.Fatalf("delete --keep-workspace: %d %s", code, errOut)
	}
	waitGone(t, w, "verbs")
	if b, err := os.ReadFile(filepath.Join(r.Workspace, "data")); err != nil || string(b) != "data\n" {
		t.Fatalf("delete --keep-workspace lost the workspace: %q %v", b, err)
	}
	s2 := w.create("verbs", `exec sleep 1000`)
	if b, _ := os.ReadFile(filepath.Join(s2.Workspace, "data")); string(b) != "data\n" {
		t.Fatalf("a new sandbox of the same name does not find the kept workspace: %q", b)
	}
	if _, errOut, code := w.cli("delete", "verbs"); code != 0 {
		t.Fatalf("delete: %d %s", code, errOut)
	}
	waitGone(t, w, "verbs")
	if _, err := os.Stat(s2.Workspace); !os.IsNotExist(err) {
		t.Fatalf("delete left the workspace: %v", err)
	}
	if _, errOut, code := w.cli("stop", "nosuch"); code != 3 || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("stop of an unknown sandbox: %d %q, want 3", code, errOut)
	}
}

func waitGone(t *testing.T, w *world, name string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, code := w.get(name); code == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still exists 15 s after delete", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBoundaryFailedRecovers: a proxy listener that keeps failing past its
// restart budget (armed at proxy.listen) ends in Error/BoundaryFailed; the
// gateway recovers the sandbox with a fresh supervisor on the same
// workspace.
func TestBoundaryFailedRecovers(t *testing.T) {
	w := newWorld(t, 0, "--chaos")
	s := w.create("fragile", fmt.Sprintf(`echo keep > /sandbox/keep; while true; do curl -s -m 2 -o /dev/null http://api.test:%d/; sleep 0.2; done`, w.webPort))
	w.file(s, "keep")
	if _, errOut, code := w.cli("fault", "fragile", "proxy.listen=error"); code != 0 {
		t.Fatalf("arm proxy.listen: %d %s", code, errOut)
	}
	r := w.waitPhase("fragile", "Ready", 20*time.Second, func(n status) bool { return n.SupervisorPid != s.SupervisorPid })
	seen := false
	for _, tr := range r.Transitions {
		seen = seen || (tr.To == "Error" && tr.Reason == "BoundaryFailed")
	}
	if !seen {
		t.Fatalf("no Error/BoundaryFailed in the transitions: %+v", r.Transitions)
	}
	if got := w.file(r, "keep"); got != "keep\n" {
		t.Fatalf("workspace after recovery: %q", got)
	}
}

// TestWorkloadExits: exit 0 -> Completed (start runs it again); a failing
// workload with restart on-failure is restarted on the same workspace until
// it stays up; with restart never it stays in Error/WorkloadFailed, and
// stop and start work from there.
func TestWorkloadExits(t *testing.T) {
	w := newWorld(t, 0)
	run := func(name, restart, script string) {
		t.Helper()
		out, errOut, code := w.cli("create", name, "--policy", w.policy, "--restart", restart, "--no-wait", "--", "/bin/sh", "-c", script)
		if code != 0 {
			t.Fatalf("create %s: %d %s%s", name, code, out, errOut)
		}
	}
	counter := `n=$(cat /sandbox/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /sandbox/n; `

	run("done", "on-failure", counter+`exit 0`)
	w.waitPhase("done", "Completed", 15*time.Second, nil)
	if _, errOut, code := w.cli("start", "done"); code != 0 {
		t.Fatalf("start from Completed: %d %s", code, errOut)
	}
	w.waitPhase("done", "Completed", 15*time.Second, func(s status) bool {
		b, _ := os.ReadFile(filepath.Join(s.Workspace, "n"))
		return string(b) == "2\n"
	})

	run("flaky", "on-failure", counter+`[ $n -ge 3 ] && exec sleep 1000; exit 1`)
	f := w.waitPhase("flaky", "Ready", 30*time.Second, func(s status) bool {
		b, _ := os.ReadFile(filepath.Join(s.Workspace, "n"))
		return string(b) == "3\n"
	})
	failed := 0
	for _, tr := range f.Transitions {
		if tr.Reason == "WorkloadFailed" && tr.To == "Error" {
			failed++
		}
	}
	if failed < 1 {
		t.Fatalf("no Error/WorkloadFailed on the way: %+v", f.Transitions)
	}

	run("once", "never", `exit 3`)
	e := w.waitPhase("once", "Error", 15*time.Second, nil)
	if e.Reason != "WorkloadFailed" || !strings.Contains(e.Message, "3") {
		t.Fatalf("restart never, exit 3: %s/%s %q", e.Phase, e.Reason, e.Message)
	}
	if _, errOut, code := w.cli("stop", "once"); code != 0 {
		t.Fatalf("stop from Error: %d %s", code, errOut)
	}
	w.waitPhase("once", "Stopped", 15*time.Second, nil)
}

// TestStartFailed: a policy whose hard_requirement names a path that does
// not exist fails the start: Error/StartFailed with the supervisor's reason
// (the path) in the message, and no recovery attempts (a retry would fail
// the same way: issue 12); stop gets out.
func TestStartFailed(t *testing.T) {
	w := newWorld(t, 0)
	bad := filepath.Join(sharedDir(t, 0), "policy.yaml")
	write(t, bad, `version: 1
filesystem_policy:
  read_only: [/usr, /nonexistent-stockade-path]
  read_write: [/sandbox]
landlock:
  compatibility: hard_requirement
`)
	if out, errOut, code := w.cli("create", "nostart", "--policy", bad, "--no-wait", "--", "/bin/true"); code != 0 {
		t.Fatalf("create: %d %s%s", code, out, errOut)
	}
	if s := w.waitPhase("nostart", "Error", 15*time.Second, nil); s.Reason != "StartFailed" || !neverRecovered(s) {
		t.Fatalf("want Error/StartFailed without retries: %s/%s %+v", s.Phase, s.Reason, s.Transitions)
	}
	out, _, _ := w.cli("get", "nostart")
	if !strings.Contains(out, "nonexistent-stockade-path") {
		t.Fatalf("the reason does not name the missing path:\n%s", out)
	}
	if _, errOut, code := w.cli("stop", "nostart"); code != 0 {
		t.Fatalf("stop from Error: %d %s", code, errOut)
	}
	w.waitPhase("nostart", "Stopped", 15*time.Second, nil)
}
