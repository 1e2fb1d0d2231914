package main

import (
	"os"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestServeScalesGoProcessors: `boundary serve` starts the processor
// scaler (internal/procs) unless the operator set GOMAXPROCS. When it
// moves is internal/procs's tests (at its seams) and ARCHITECTURE.md's
// measurements: on a loaded machine the moves depend on the load of
// everything else, so this test checks the wiring, which does not.
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
