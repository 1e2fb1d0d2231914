package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a kind of injected fault. Values are explicit and stable: they
// appear in reports.
type Kind int

// The fault kinds.
const (
	KindIdentityError      Kind = 1
	KindIdentityPanic      Kind = 2
	KindDNSUpstreamError   Kind = 3
	KindDNSUpstreamTimeout Kind = 4
	KindDNSQueryPanic      Kind = 5
	KindPolicyDecideError  Kind = 6
	KindMalformedProxy     Kind = 7
	KindMalformedDNS       Kind = 8
	KindRelayCut           Kind = 9
	KindSessionCut         Kind = 10
	KindSupervisorKill     Kind = 11
	KindSupervisorStop     Kind = 12
	KindWorkloadCrash      Kind = 13
	KindGatewayKill        Kind = 14
	KindStoreWriteError    Kind = 15
	KindPolicyReload       Kind = 16
	// Cluster kinds (`chaos run --cluster`).
	KindNodeKill Kind = 17 // SIGKILL the node driving the most sandboxes; restart it once they moved
	KindNodeStop Kind = 18 // SIGSTOP that node for N s (past the lease TTL), then SIGCONT
	KindEtcdKill Kind = 19 // SIGKILL etcd, N s down, restart on its data dir and ports
	KindEtcdCut  Kind = 20 // cut that node's etcd link (its proxy) for N s, then heal
)

// lastKind is the highest kind value.
const lastKind = KindEtcdCut

// clusterNodes is how many gateway nodes a cluster run has; a cluster
// step's Target is a node index below it.
const clusterNodes = 3

// String returns the kind's report name.
func (k Kind) String() string {
	switch k {
	case KindIdentityError:
		return "identity-error"
	case KindIdentityPanic:
		return "identity-panic"
	case KindDNSUpstreamError:
		return "dns-upstream-error"
	case KindDNSUpstreamTimeout:
		return "dns-upstream-timeout"
	case KindDNSQueryPanic:
		return "dns-query-panic"
	case KindPolicyDecideError:
		return "policy-decide-error"
	case KindMalformedProxy:
		return "malformed-proxy"
	case KindMalformedDNS:
		return "malformed-dns"
	case KindRelayCut:
		return "relay-cut"
	case KindSessionCut:
		return "session-cut"
	case KindSupervisorKill:
		return "supervisor-kill"
	case KindSupervisorStop:
		return "supervisor-stop"
	case KindWorkloadCrash:
		return "workload-crash"
	case KindGatewayKill:
		return "gateway-kill"
	case KindStoreWriteError:
		return "store-write-error"
	case KindPolicyReload:
		return "policy-reload"
	case KindNodeKill:
		return "node-kill"
	case KindNodeStop:
		return "node-stop"
	case KindEtcdKill:
		return "etcd-kill"
	case KindEtcdCut:
		return "etcd-cut"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// Local reports whether the kind stays at connection or query level: it
// must never move a sandbox out of Ready nor restart a session or relay.
func (k Kind) Local() bool { return k <= KindMalformedDNS || k == KindPolicyReload }

// Cluster reports whether the kind hits a node or etcd (only in a
// cluster run).
func (k Kind) Cluster() bool { return k >= KindNodeKill && k <= KindEtcdCut }

// Scenario is a named mix of fault kinds with weights.
type Scenario struct {
	Name  string
	About string
	// Kinds and their relative weights.
	Weights map[Kind]int
	// Loud is how many of the sandboxes take process-level faults (the
	// others, "quiet", only connection-level ones).
	Loud int
	// Cluster: the scenario needs a cluster run (its kinds hit nodes and
	// etcd); gateway-kill then kills one node.
	Cluster bool
	// First are kinds scheduled before the rest of the first round (a
	// short run reaches them before its fault budget is spent).
	First []Kind
}

// Scenarios are the named scenarios; "all" mixes every kind.
func Scenarios() []Scenario {
	local := map[Kind]int{
		KindIdentityError: 3, KindIdentityPanic: 3, KindDNSUpstreamError: 2, KindDNSUpstreamTimeout: 1,
		KindDNSQueryPanic: 2, KindPolicyDecideError: 2, KindMalformedProxy: 2, KindMalformedDNS: 2, KindPolicyReload: 2,
	}
	all := map[Kind]int{KindRelayCut: 2, KindSessionCut: 1, KindSupervisorKill: 2, KindSupervisorStop: 1,
		KindWorkloadCrash: 2, KindGatewayKill: 1, KindStoreWriteError: 1}
	clusterMix := map[Kind]int{KindRelayCut: 2, KindSessionCut: 1, KindSupervisorKill: 2, KindSupervisorStop: 1,
		KindWorkloadCrash: 2, KindGatewayKill: 2, KindStoreWriteError: 1, KindNodeKill: 3, KindNodeStop: 3, KindEtcdKill: 3, KindEtcdCut: 3}
	for k, w := range local {
		all[k] = w
		clusterMix[k] = w
	}
	return []Scenario{
		{Name: "identity-deny", About: "seed failure 1: peer identity lookups fail (error, panic) on denied and allowed connections",
			Weights: map[Kind]int{KindIdentityError: 1, KindIdentityPanic: 1}},
		{Name: "unlisted-dns", About: "seed failure 2: unlisted names, DNS query panics and upstream errors and timeouts during execs",
			Weights: map[Kind]int{KindDNSQueryPanic: 2, KindDNSUpstreamError: 2, KindDNSUpstreamTimeout: 1, KindMalformedDNS: 1}},
		{Name: "error-recovery", About: "seed failure 3: sandboxes pushed into Error by every process-level fault, recovered with their workspace",
			Weights: map[Kind]int{KindSupervisorKill: 2, KindSupervisorStop: 1, KindSessionCut: 1, KindWorkloadCrash: 2,
				KindGatewayKill: 1, KindStoreWriteError: 1, KindRelayCut: 1}, Loud: 2},
		{Name: "all", About: "every fault kind, quiet sandboxes taking only connection-level ones", Weights: all, Loud: 2},
		{Name: "cluster", About: "3 gateway nodes on a real etcd: node SIGKILL and SIGSTOP past the lease TTL, etcd SIGKILL and restart, " +
			"a node cut from etcd, node restarts, mixed with every other kind (store write errors armed on the node driving the sandbox)",
			Weights: clusterMix, Loud: 2, Cluster: true,
			// The cluster kinds, a node restart and the largest bursts first:
			// CI's short run reaches them within its 300 faults.
			First: []Kind{KindNodeKill, KindNodeStop, KindEtcdKill, KindEtcdCut, KindGatewayKill,
				KindMalformedProxy, KindIdentityPanic, KindMalformedDNS, KindIdentityError}},
	}
}

// ScenarioNamed finds a scenario.
func ScenarioNamed(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("chaos: no scenario %q; scenarios: %s", name, strings.Join(names, ", "))
}

// Step is one scheduled fault.
type Step struct {
	Seq  int  `json:"seq"`
	Kind Kind `json:"-"`
	// Target is the index of the sandbox it hits (-1: the gateway, or
	// etcd); for node kinds (and gateway-kill in a cluster) a node index.
	Target int `json:"target"`
	// N is the fault's size: how many faults a burst arms, how many
	// seconds a cut or stop lasts.
	N int `json:"n"`
	// Pause is how long to let steady work run before this step.
	Pause time.Duration `json:"pause_ns"`
}

// Plan makes the schedule: steps steps for scenario sc over sandboxes
// sandboxes, the same for the same seed.
func Plan(sc Scenario, seed uint64, sandboxes, steps int) []Step {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	kinds := make([]Kind, 0, len(sc.Weights))
	for k := range sc.Weights {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	// The first round: sc.First, then the other kinds in order.
	round := append([]Kind(nil), sc.First...)
	for _, k := range kinds {
		if !slices.Contains(sc.First, k) {
			round = append(round, k)
		}
	}
	total := 0
	for _, k := range kinds {
		total += sc.Weights[k]
	}
	loud := min(sc.Loud, sandboxes)
	out := make([]Step, 0, steps)
	for i := 0; i < steps; i++ {
		// Every kind once before any repeats (the schedule covers the
		// mix even when short), then by weight.
		var k Kind
		if i < len(round) {
			k = round[i]
		} else {
			x := r.IntN(total)
			for _, kk := range kinds {
				if x -= sc.Weights[kk]; x < 0 {
					k = kk
					break
				}
			}
		}
		s := Step{Seq: i, Kind: k, Pause: time.Duration(50+r.IntN(250)) * time.Millisecond}
		switch {
		case k == KindEtcdKill:
			s.Target = -1
		case k.Cluster() || (k == KindGatewayKill && sc.Cluster):
			// The node to hit (node-kill, node-stop and etcd-cut hit the
			// node driving the most sandboxes, searching from this one).
			s.Target = r.IntN(clusterNodes)
		case k == KindGatewayKill || k == KindStoreWriteError:
			s.Target = -1 // store-write-error: the node driving the last sandbox
		case k.Local() || loud == 0:
			s.Target = r.IntN(sandboxes)
		default: // process-level: only loud sandboxes
			s.Target = sandboxes - loud + r.IntN(loud)
		}
		switch k {
		case KindIdentityError, KindIdentityPanic, KindPolicyDecideError:
			s.N = 20 + r.IntN(41)
		case KindDNSUpstreamError, KindDNSQueryPanic:
			s.N = 10 + r.IntN(21)
		case KindDNSUpstreamTimeout:
			s.N = 1 + r.IntN(3)
		case KindMalformedProxy, KindMalformedDNS:
			s.N = 30 + r.IntN(71)
		case KindSessionCut:
			s.N = 4 + r.IntN(6) // seconds silent: some within the grace, some past it
		case KindSupervisorStop:
			s.N = []int{1, 2, 4, 5, 6, 7}[r.IntN(6)] // seconds stopped; never 3 (the heartbeat limit)
		case KindNodeStop, KindEtcdCut:
			s.N = 5 + r.IntN(4) // seconds: 2.5 to 4 lease TTLs of 2 s
		case KindEtcdKill:
			s.N = 1 + r.IntN(3) // seconds down before the restart
		default:
			s.N = 1
		}
		out = append(out, s)
	}
	return out
}

// Fingerprint is a short hash of a schedule: equal seeds, equal prints.
func Fingerprint(steps []Step) string {
	h := sha256.New()
	for _, s := range steps {
		fmt.Fprintf(h, "%d %d %d %d %d\n", s.Seq, s.Kind, s.Target, s.N, s.Pause)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
