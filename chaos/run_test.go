package chaos

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

var bin string // the stockade binary under test

func TestMain(m *testing.M) { os.Exit(testenv.MainWithStockade(m, "../cmd/stockade", &bin)) }

// run runs a scenario with real gateway and supervisor processes and
// fails on any broken invariant.
func run(t *testing.T, scenario string, seed uint64, faults int, limit time.Duration) *Report {
	t.Helper()
	testenv.NeedRoot(t) // sandboxes map a host uid range
	for _, tool := range []struct{ name, pkg string }{{"curl", "curl"}, {"dig", "dnsutils"}, {"bash", "bash"}} {
		testenv.NeedTool(t, tool.name, tool.pkg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit+3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, Options{Binary: bin, Scenario: scenario, Seed: seed, Faults: faults, Duration: limit, Progress: &progress})
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, progress.String())
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("\n%s", table.String())
	if !rep.OK() {
		for _, inv := range rep.Invariants {
			for _, v := range inv.Violations {
				t.Errorf("%s: %s", inv.Name, v)
			}
		}
		t.Fatalf("invariants broken; run dir kept: %s", rep.Dir)
	}
	if rep.Injected < faults {
		t.Fatalf("only %d faults injected in %s, want >= %d", rep.Injected, limit, faults)
	}
	return rep
}

// TestChaosShortRun is CI's chaos run: every fault kind, at least 500
// injected faults over at least 10 kinds, every invariant held.
func TestChaosShortRun(t *testing.T) {
	rep := run(t, "all", 20261129, 500, 100*time.Second)
	kinds := 0
	for _, k := range rep.Kinds {
		if k.Injected > 0 {
			kinds++
		}
	}
	if kinds < 10 {
		t.Fatalf("faults of %d kinds injected, want >= 10", kinds)
	}
}

// TestSeedScenarios runs the three seed failures as scenarios of their
// own, briefly: connection-level only for the first two (so the quiet
// invariant covers every sandbox), process-level for the third.
func TestSeedScenarios(t *testing.T) {
	for _, sc := range []struct {
		name   string
		faults int
	}{{"identity-deny", 150}, {"unlisted-dns", 100}, {"error-recovery", 6}} {
		t.Run(sc.name, func(t *testing.T) { run(t, sc.name, 4, sc.faults, 60*time.Second) })
	}
}
