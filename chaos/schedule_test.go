package chaos

import (
	"testing"
)

// TestPlanReplays: the same seed gives the same schedule, another seed
// another one; every kind of a scenario comes before any repeats; process
// faults only hit loud sandboxes; connection-level ones may hit any.
func TestPlanReplays(t *testing.T) {
	for _, sc := range Scenarios() {
		a, b := Plan(sc, 7, 4, 300), Plan(sc, 7, 4, 300)
		if Fingerprint(a) != Fingerprint(b) {
			t.Fatalf("%s: same seed, different schedules", sc.Name)
		}
		if Fingerprint(a) == Fingerprint(Plan(sc, 8, 4, 300)) {
			t.Fatalf("%s: seeds 7 and 8 gave the same schedule", sc.Name)
		}
		first := map[Kind]bool{}
		for _, s := range a[:len(sc.Weights)] {
			first[s.Kind] = true
		}
		if len(first) != len(sc.Weights) {
			t.Errorf("%s: the first %d steps cover %d kinds", sc.Name, len(sc.Weights), len(first))
		}
		quietHit := false
		for _, s := range a {
			if sc.Weights[s.Kind] == 0 {
				t.Fatalf("%s: step %d has kind %s, not in the scenario", sc.Name, s.Seq, s.Kind)
			}
			switch {
			case s.Kind == KindGatewayKill || s.Kind == KindStoreWriteError:
				if s.Target != -1 {
					t.Errorf("%s: gateway fault aimed at sandbox %d", sc.Name, s.Target)
				}
			case !s.Kind.Local():
				if s.Target < 4-sc.Loud {
					t.Errorf("%s: process fault %s hit quiet sandbox %d", sc.Name, s.Kind, s.Target)
				}
			case s.Target < 4-sc.Loud:
				quietHit = true
			}
			if s.N <= 0 || (s.Kind == KindSupervisorStop && s.N == 3) {
				t.Errorf("%s: step %d %s has size %d", sc.Name, s.Seq, s.Kind, s.N)
			}
		}
		hasLocal := false
		for k := range sc.Weights {
			hasLocal = hasLocal || k.Local()
		}
		if hasLocal && sc.Loud < 4 && !quietHit {
			t.Errorf("%s: no connection-level fault hit a quiet sandbox", sc.Name)
		}
	}
	if _, err := ScenarioNamed("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := KindIdentityError; k <= KindPolicyReload; k++ {
		n := k.String()
		if seen[n] || n == "" || n[0] == 'k' {
			t.Errorf("kind %d: name %q", int(k), n)
		}
		seen[n] = true
	}
	if Kind(99).String() != "kind(99)" {
		t.Error("unknown kind name")
	}
}
