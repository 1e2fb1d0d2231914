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
			case s.Kind == KindEtcdKill || s.Kind == KindStoreWriteError || (!sc.Cluster && s.Kind == KindGatewayKill):
				if s.Target != -1 {
					t.Errorf("%s: gateway or etcd fault aimed at sandbox %d", sc.Name, s.Target)
				}
			case s.Kind.Cluster() || s.Kind == KindGatewayKill:
				if !sc.Cluster || s.Target < 0 || s.Target >= clusterNodes {
					t.Errorf("%s: node fault %s aimed at node %d", sc.Name, s.Kind, s.Target)
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

// TestPlanCluster: the cluster scenario has every cluster kind, and
// schedules its First kinds, in order, first; the
// other scenarios have no cluster kind.
func TestPlanCluster(t *testing.T) {
	sc, err := ScenarioNamed("cluster")
	if err != nil || !sc.Cluster {
		t.Fatalf("cluster scenario: %+v %v", sc, err)
	}
	for _, k := range []Kind{KindNodeKill, KindNodeStop, KindEtcdKill, KindEtcdCut} {
		if sc.Weights[k] == 0 || !k.Cluster() || k.Local() {
			t.Errorf("cluster scenario: kind %s weight %d", k, sc.Weights[k])
		}
	}
	steps := Plan(sc, 20261201, 4, 50)
	for i, k := range sc.First {
		if steps[i].Kind != k {
			t.Errorf("step %d is %s, want %s", i, steps[i].Kind, k)
		}
	}
	for _, s := range steps {
		if (s.Kind == KindNodeStop || s.Kind == KindEtcdCut) && (s.N < 5 || s.N > 8) {
			t.Errorf("step %d %s lasts %d s, want 5..8 (past the 2 s lease TTL)", s.Seq, s.Kind, s.N)
		}
	}
	for _, other := range Scenarios() {
		for k := range other.Weights {
			if k.Cluster() && !other.Cluster {
				t.Errorf("scenario %s has cluster kind %s", other.Name, k)
			}
		}
	}
}

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := KindIdentityError; k <= lastKind; k++ {
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
