package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/sysmon"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestServeScalesGoProcessors: `boundary serve` starts the processor
// scaler (internal/procs) unless the operator set GOMAXPROCS. When it
// moves is internal/procs's tests (at its seams) and the measurements in
// docs/bench-history.md (stops 27 and 35): on a loaded machine the moves
// depend on the load of everything else, so this test checks the wiring,
// which does not.
func TestServeScalesGoProcessors(t *testing.T) {
	f := newFixture(t)
	args := []string{"--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream", "--log-level", "debug"}

	fixed := serveEnv(t, []string{"GOMAXPROCS=2"}, args...)
	testenv.Eventually(t, 10*time.Second, func() bool {
		return fixed.logHas(`"GOMAXPROCS":"2"`) && fixed.logHas("go processor scaling off: GOMAXPROCS is set in the environment")
	}, "serve with GOMAXPROCS=2 says the scaler is off")
	if fixed.logHas("go processor scaling on") {
		t.Fatalf("serve with GOMAXPROCS=2 started the scaler:\n%s", fixed.p.Log.String())
	}

	// serve inherits the test's environment: without GOMAXPROCS in it
	// (t.Setenv puts back what was there at the end).
	t.Setenv("GOMAXPROCS", "")
	if err := os.Unsetenv("GOMAXPROCS"); err != nil {
		t.Fatal(err)
	}
	s := serve(t, args...)
	// On; or, where the runtime's default is one processor (one CPU, or a
	// cgroup limit of one), off for that reason and not the environment.
	testenv.Eventually(t, 10*time.Second, func() bool {
		return s.logHas("go processor scaling on") || s.logHas("go processor scaling off: one processor to begin with")
	}, "serve starts the scaler")
	if s.logHas("GOMAXPROCS is set in the environment") {
		t.Fatalf("serve without GOMAXPROCS says it is set:\n%s", s.p.Log.String())
	}
}

// TestServeKeepsSysmonAwake: `boundary serve` runs again as the same
// process with Go's monitor thread kept out of deep sleep
// (internal/sysmon), unless the operator's GODEBUG names schedtrace.
func TestServeKeepsSysmonAwake(t *testing.T) {
	f := newFixture(t)
	args := []string{"--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream"}
	environ := func(s *served) string {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	awake := serveEnv(t, []string{"GODEBUG=gctrace=0"}, args...)
	if want := "\x00GODEBUG=gctrace=0," + sysmon.Setting + "\x00"; !strings.Contains("\x00"+environ(awake), want) {
		t.Fatalf("serve's environment (pid %d, the one started) lacks %q:\n%q", awake.cmd.Process.Pid, want, environ(awake))
	}
	optOut := serveEnv(t, []string{"GODEBUG=schedtrace=0"}, args...)
	if env := environ(optOut); !strings.Contains("\x00"+env, "\x00GODEBUG=schedtrace=0\x00") || strings.Contains(env, sysmon.Setting) {
		t.Fatalf("serve with GODEBUG=schedtrace=0 changed it:\n%q", env)
	}
}
