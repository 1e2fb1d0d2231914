package main

import (
	"os"
	"runtime"
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

	if v, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skipf("GOMAXPROCS=%s is set in the test's environment and serve inherits it: the scaler's start cannot be shown here", v)
	}
	s := serve(t, args...)
	want := "go processor scaling on"
	if runtime.GOMAXPROCS(0) == 1 {
		want = "go processor scaling off: one processor to begin with"
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return s.logHas(want) }, "serve logs "+want)
}
