package chaos

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"
)

// Report is the result of a run (written as JSON by --report).
type Report struct {
	Scenario    string       `json:"scenario"`
	About       string       `json:"about"`
	Seed        uint64       `json:"seed"`
	Fingerprint string       `json:"schedule_fingerprint"`
	Steps       int          `json:"steps"`
	Sandboxes   int          `json:"sandboxes"`
	Injecting   string       `json:"injecting_for"`
	SettledIn   string       `json:"settled_in"`
	Injected    int          `json:"injected_total"`
	Kinds       []KindReport `json:"kinds"`
	Invariants  []Invariant  `json:"invariants"`
	Execs       execStats    `json:"execs"`
	// MalformedProxy: malformed proxy requests sent (in execs that
	// completed) and how many got a 4xx answer (the rest were closed).
	MalformedProxy [2]int `json:"malformed_proxy_sent_answered_4xx"`
	// Goroutines of the idle gateway before and after.
	Goroutines [2]int `json:"gateway_goroutines_idle_before_after"`
	// Cluster is set for a cluster run.
	Cluster *ClusterInfo `json:"cluster,omitempty"`
	Dir     string       `json:"dir,omitempty"`
}

// ClusterInfo describes a cluster run.
type ClusterInfo struct {
	Nodes    int    `json:"nodes"`
	LeaseTTL string `json:"lease_ttl"`
	// OwnerPolls are the monitor's polls of every live node whose answers
	// came within a third of a TTL of each other (the one-owner check);
	// OwnerPollsSpread are those that took longer and prove nothing.
	OwnerPolls       int `json:"owner_polls"`
	OwnerPollsSpread int `json:"owner_polls_spread"`
}

// KindReport is one fault kind's line of the table.
type KindReport struct {
	Kind     string `json:"kind"`
	Steps    int    `json:"steps"`
	Injected int    `json:"injected"`
	// Recovery: for connection-level kinds the time of the next
	// successful exec through the boundary; for process-level ones from
	// the fault until the sandbox (or all, for the gateway) is Ready.
	Recovered  int     `json:"recovered"`
	RecoverP50 float64 `json:"recovery_p50_ms"`
	RecoverP99 float64 `json:"recovery_p99_ms"`
	// Moved: node faults (cluster runs), the sandboxes the hit node drove.
	Moved int `json:"sandboxes_moved,omitempty"`
}

// Invariant is one invariant's result.
type Invariant struct {
	Name       string   `json:"name"`
	OK         bool     `json:"ok"`
	Checked    int      `json:"checked"`
	Violations []string `json:"violations,omitempty"`
}

// invariantNames are every invariant a run checks, in report order (a
// cluster run adds its own).
func invariantNames(cluster bool) []string {
	out := []string{"no-sandbox-lost", "quiet-stay-ready", "recovered", "next-works", "denials-clean",
		"exec-status", "malformed-answered", "settled", "workspace-intact", "denials-audited", "no-goroutine-leak",
		"policy-kept", "restart-converges", "clean-shutdown", "no-orphans"}
	if cluster {
		out = append(out, "one-owner", "one-supervisor", "ready-after-fault")
	}
	return out
}

// OK reports whether every invariant held.
func (rep *Report) OK() bool {
	for _, inv := range rep.Invariants {
		if !inv.OK {
			return false
		}
	}
	return true
}

func (r *runner) fill(rep *Report) {
	r.l.mu.Lock()
	rep.Execs = r.l.execs
	rep.MalformedProxy = r.malformed
	bad := append([]string(nil), r.l.bad...)
	r.l.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.broken["exec-status"] = append(r.broken["exec-status"], bad...)
	r.checks["malformed-answered"] += r.malformed[0]
	if r.malformed[1] < r.malformed[0] {
		r.broken["malformed-answered"] = append(r.broken["malformed-answered"],
			fmt.Sprintf("%d of %d malformed proxy requests got no 4xx answer", r.malformed[0]-r.malformed[1], r.malformed[0]))
	}
	r.checks["exec-status"] += rep.Execs.Total
	kinds := make([]Kind, 0, len(r.stats))
	for k := range r.stats {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	for _, k := range kinds {
		s := r.stats[k]
		kr := KindReport{Kind: k.String(), Steps: s.steps, Injected: s.injected, Recovered: len(s.recovery), Moved: r.moved[k]}
		kr.RecoverP50, kr.RecoverP99 = quantile(s.recovery, 0.50), quantile(s.recovery, 0.99)
		rep.Kinds = append(rep.Kinds, kr)
		rep.Injected += s.injected
	}
	if rep.Cluster != nil {
		rep.Cluster.OwnerPolls, rep.Cluster.OwnerPollsSpread = r.ownerPolls[0], r.ownerPolls[1]
	}
	for _, n := range invariantNames(rep.Cluster != nil) {
		v := r.broken[n]
		rep.Invariants = append(rep.Invariants, Invariant{Name: n, OK: len(v) == 0, Checked: r.checks[n], Violations: v})
	}
}

// quantile in milliseconds (nearest rank); 0 for no samples.
func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s)) + 0.5)
	i = min(max(i-1, 0), len(s)-1)
	return float64(s[i].Microseconds()) / 1000
}

// WriteTable prints the report as tables.
func (rep *Report) WriteTable(out io.Writer) {
	fmt.Fprintf(out, "chaos run: scenario %s, seed %d, schedule %s (%d steps), %d sandboxes, injecting %s, settled in %s\n",
		rep.Scenario, rep.Seed, rep.Fingerprint, rep.Steps, rep.Sandboxes, rep.Injecting, rep.SettledIn)
	c := rep.Cluster
	if c != nil {
		fmt.Fprintf(out, "cluster: %d nodes on one etcd, lease TTL %s; one-owner polls %d (and %d whose answers spread over a third of a TTL)\n",
			c.Nodes, c.LeaseTTL, c.OwnerPolls, c.OwnerPollsSpread)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	moved, movedCol := "", ""
	if c != nil {
		movedCol = "\tMOVED"
	}
	fmt.Fprintln(tw, "FAULT KIND\tSTEPS\tINJECTED\tRECOVERED\tRECOVERY P50\tRECOVERY P99"+movedCol)
	for _, k := range rep.Kinds {
		if c != nil {
			moved = fmt.Sprintf("\t%d", k.Moved)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f ms\t%.0f ms%s\n", k.Kind, k.Steps, k.Injected, k.Recovered, k.RecoverP50, k.RecoverP99, moved)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\t\t\n", rep.Steps, rep.Injected)
	_ = tw.Flush()
	fmt.Fprintf(out, "execs: %d, %d with their exit status, %d with a clear error while a fault cut them, %d broken; gateway goroutines idle %d -> %d; malformed proxy requests answered 4xx: %d of %d\n",
		rep.Execs.Total, rep.Execs.WithStatus, rep.Execs.ClearError, rep.Execs.Bad, rep.Goroutines[0], rep.Goroutines[1],
		rep.MalformedProxy[1], rep.MalformedProxy[0])
	tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tRESULT\tCHECKED\tFIRST VIOLATION")
	for _, inv := range rep.Invariants {
		res, first := "ok", ""
		if !inv.OK {
			res, first = fmt.Sprintf("BROKEN x%d", len(inv.Violations)), inv.Violations[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", inv.Name, res, inv.Checked, first)
	}
	_ = tw.Flush()
}
