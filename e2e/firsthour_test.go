package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFirstHour walks issue 12's first hour in one go, as a newcomer
// would: a gateway started with no port flags beside another one, the
// version, `ls` and a typo, a command that does not exist, a policy with
// no filesystem section, a watch through stop, and connect to the
// stopped sandbox. (Each step has its own thorough test too: TestPorts*,
// TestCLI*, TestFailFast, TestConnectExitCodes.)
func TestFirstHour(t *testing.T) {
	// Two gateways side by side: different --listen, no --relay-listen.
	w, other := newWorld(t, 0), newWorld(t, 0)
	w.restartWithDefaultRelay(nil)
	other.restartWithDefaultRelay(nil)
	if w.proc.Addrs.Relay == other.proc.Addrs.Relay {
		t.Fatalf("two gateways advertise one relay address %s", w.proc.Addrs.Relay)
	}

	// What am I running; what is here; a typo.
	if out, _, code := run(t, nil, "version"); code != 0 || !strings.Contains(out, "goVersion ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
	if out, errOut, code := w.cli("ls"); code != 0 || !strings.HasPrefix(out, "NAME") {
		t.Fatalf("sandbox ls: exit %d %q %q", code, out, errOut)
	}
	if _, errOut, code := w.cli("lss"); code != 2 || !strings.Contains(errOut, "did you mean list (alias ls)?") {
		t.Fatalf("sandbox lss: exit %d %q; want 2 with a suggestion", code, errOut)
	}

	// A command that does not exist fails at once, naming it.
	began := time.Now()
	out, errOut, code := w.cli("create", "oops", "--policy", w.policy, "--", "/no/such/bin")
	if took := time.Since(began); code == 0 || took > 2*time.Second || !strings.Contains(out+errOut, "/no/such/bin") {
		t.Fatalf("create with a missing binary: exit %d after %s: %s%s; want a failure naming the path in under 2 s", code, took, out, errOut)
	}

	// A network-only policy (no filesystem_policy): the baseline runs a shell.
	netOnly := filepath.Join(sharedDir(t, 0), "net-only.yaml")
	write(t, netOnly, fmt.Sprintf("version: 1\nnetwork_policies:\n  api:\n    name: api\n    endpoints: [{ host: api.test, port: %d }]\n    binaries: [{ path: /usr/bin/curl }]\n", w.webPort))
	if out, errOut, code := w.cli("create", "first", "--policy", netOnly, "--", "/bin/sh", "-c", "echo ok; exec sleep 1000"); code != 0 {
		t.Fatalf("create with a network-only policy: exit %d %s%s", code, out, errOut)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs, _, _ := w.cli("logs", "first")
		if strings.Contains(logs, "out: ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no `out: ok` in the logs of a network-only sandbox:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Watch it through a stop (its supervisor held by SIGSTOP, so that
	// Stopping lasts the grace period and the watch sees it).
	s, _ := w.get("first")
	watch := w.watch(t, "get", "first", "-w")
	watch.until(t, 10*time.Second, "first", "Ready")
	if err := syscall.Kill(s.SupervisorPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := w.cli("stop", "first"); code != 0 || !strings.Contains(out, "first: Stopped (+") {
		t.Fatalf("stop: exit %d %q %q; want it to wait for Stopped", code, out, errOut)
	}
	watch.until(t, 10*time.Second, "first", "Stopping")
	watch.until(t, 10*time.Second, "first", "Stopped")
	watch.interrupt(t)

	// connect to the stopped sandbox: the documented exit code and one line.
	_, errOut, code = w.cli("connect", "first")
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); code != 4 || len(lines) != 1 || !strings.Contains(errOut, "Stopped") {
		t.Fatalf("connect to a stopped sandbox: exit %d %q; want 4 and one line naming the phase", code, errOut)
	}
}
