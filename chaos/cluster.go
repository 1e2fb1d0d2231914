package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/messages"
)

// A cluster run: a real etcd, clusterNodes gateway nodes sharing the run's
// state dir, each reaching etcd through its own proxy. Its invariants, on
// top of the single gateway's:
//
//	one-owner          no two nodes drive one sandbox at one observed instant
//	one-supervisor     never two supervisor processes of one sandbox, and no
//	                   supervisor refused by another's workspace lock
//	ready-after-fault  after every node or etcd fault, every sandbox is Ready
//	                   and driven by one live node, with every live node
//	                   agreeing which, within clusterBound

// clusterBound is how long after a cluster fault every sandbox may take to
// be Ready under one live node.
const clusterBound = 30 * time.Second

// startCluster makes the cluster CA in the state dir and names the nodes;
// startGateway then starts them.
func (w *world) startCluster(ctx context.Context, nodes int) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pki := filepath.Join(w.state, "pki")
	if out, err := exec.CommandContext(cctx, w.bin, "cluster", "init", pki).CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: stockade cluster init %s: %w: %s", pki, err, clip(string(out)))
	}
	w.gws = nil
	for i := range nodes {
		w.gws = append(w.gws, &gw{name: fmt.Sprintf("n%d", i+1)})
	}
	return nil
}

// nodeList is one node's answer to a list.
type nodeList struct {
	i         int
	name      string
	sbs       []*messages.SandboxStatus
	err       error
	sent, got time.Time
}

// driven is what the node drives itself: its own actors' statuses carry
// its name and what only a driving actor knows (the workspace); a status
// from its view of the cluster has neither.
func (l nodeList) driven() map[string]*messages.SandboxStatus {
	out := map[string]*messages.SandboxStatus{}
	for _, st := range l.sbs {
		if st.Node == l.name && st.Workspace != "" {
			out[st.Name] = st
		}
	}
	return out
}

// listAll asks every live node for its list, all at once.
func (w *world) listAll(ctx context.Context) []nodeList {
	idx := w.live()
	sort.Ints(idx)
	out := make([]nodeList, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		w.mu.Lock()
		name := w.gws[i].name
		w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := nodeList{i: i, name: name, sent: time.Now()}
			r, err := w.requestTo(ctx, i, &messages.ListRequest{})
			switch {
			case err != nil:
				l.err = err
			case r.Status != messages.Status_STATUS_OK:
				l.err = fmt.Errorf("list: %s: %s", r.Status, r.Message)
			default:
				l.sbs = r.Sandboxes
			}
			l.got = time.Now()
			out[k] = l
		}()
	}
	wg.Wait()
	return out
}

// convergence says whether every sandbox is Ready and driven by exactly
// one live node other than node not (-1: any); agreed adds that every
// live node answered and names that node as the owner. It returns what is
// missing otherwise.
func (r *runner) convergence(ls []nodeList, not int, agreed bool) (string, bool) {
	by := map[string][]string{}
	ready := map[string]bool{}
	for _, l := range ls {
		if l.err != nil {
			if agreed {
				return fmt.Sprintf("%s: %v", l.name, l.err), false
			}
			continue
		}
		for n, st := range l.driven() {
			by[n] = append(by[n], l.name)
			ready[n] = st.Phase == "Ready"
		}
	}
	for _, n := range r.names {
		switch {
		case len(by[n]) == 0:
			return n + " driven by no live node", false
		case len(by[n]) > 1:
			return fmt.Sprintf("%s driven by %s", n, strings.Join(by[n], " and ")), false
		case not >= 0 && by[n][0] == r.w.gws[not].name:
			return fmt.Sprintf("%s still driven by %s", n, by[n][0]), false
		case !ready[n]:
			return fmt.Sprintf("%s not Ready under %s", n, by[n][0]), false
		}
	}
	if agreed {
		for _, l := range ls {
			seen := map[string]string{}
			for _, st := range l.sbs {
				seen[st.Name] = st.Node
			}
			for _, n := range r.names {
				if seen[n] != by[n][0] {
					return fmt.Sprintf("%s says %s is on %q, it is driven by %s", l.name, n, seen[n], by[n][0]), false
				}
			}
		}
	}
	return "", true
}

// waitConverged waits until every sandbox is Ready under one live node
// other than not (agreed: and every live node says so), polling every
// 100 ms until deadline. It returns the time since since, or -1 and what
// was missing.
func (r *runner) waitConverged(ctx context.Context, since, deadline time.Time, not int, agreed bool) (time.Duration, string) {
	last := "no poll"
	for ctx.Err() == nil && time.Now().Before(deadline) {
		why, ok := r.convergence(r.w.listAll(ctx), not, agreed)
		if ok {
			return time.Since(since), ""
		}
		last = why
		time.Sleep(100 * time.Millisecond)
	}
	return -1, last
}

// driverOf returns the live node driving sandbox name (-1: none).
func (r *runner) driverOf(ctx context.Context, name string) int {
	for _, l := range r.w.listAll(ctx) {
		if _, ok := l.driven()[name]; ok {
			return l.i
		}
	}
	return -1
}

// busiest returns the live node driving the most sandboxes (ties: the
// first from node from) and how many it drives.
func (r *runner) busiest(ctx context.Context, from int) (int, int) {
	counts := map[int]int{}
	for _, l := range r.w.listAll(ctx) {
		counts[l.i] = len(l.driven())
	}
	best, most := -1, -1
	for k := range r.w.gws {
		i := (from + k) % len(r.w.gws)
		if c, ok := counts[i]; ok && c > most {
			best, most = i, c
		}
	}
	if best < 0 {
		return from, 0
	}
	return best, most
}

// clusterFault runs a node or etcd fault (gateway-kill in a cluster kills
// one node and restarts it at once) and waits until the cluster has
// converged again; recovery is from the fault until every sandbox is Ready
// under one live node (for a stop or a cut, under the other nodes while
// the fault lasts).
func (r *runner) clusterFault(ctx context.Context, s Step) error {
	start := time.Now()
	var closers []func()
	for _, n := range r.names { // a node or etcd fault can cut any sandbox's execs
		closers = append(closers, r.excuse(n))
	}
	done := func() {
		for _, c := range closers {
			c()
		}
	}
	rec, moved := time.Duration(-1), 0
	name := ""
	for_ := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	var err error
	switch s.Kind {
	case KindGatewayKill:
		name = r.w.gws[s.Target].name
		r.w.killNode(s.Target)
		err = r.w.startNode(ctx, s.Target)
	case KindNodeKill:
		var i int
		i, moved = r.busiest(ctx, s.Target)
		name = r.w.gws[i].name
		r.w.killNode(i)
		rec, _ = r.waitConverged(ctx, start, start.Add(clusterBound), -1, false)
		err = r.w.startNode(ctx, i) // rejoins on its address; it drives what it claims from now on
	case KindNodeStop:
		var i int
		i, moved = r.busiest(ctx, s.Target)
		name = r.w.gws[i].name
		if err = r.w.pauseNode(i); err != nil {
			break
		}
		until := start.Add(time.Duration(s.N) * time.Second)
		rec, _ = r.waitConverged(ctx, start, until, -1, false) // moved to the others while it sleeps
		for_(time.Until(until))
		err = r.w.resumeNode(i)
	case KindEtcdKill:
		name = "etcd"
		if err = r.w.cl.etcd.Kill(); err != nil {
			break
		}
		for_(time.Duration(s.N) * time.Second)
		err = r.w.cl.etcd.Restart(ctx)
	case KindEtcdCut:
		var i int
		i, moved = r.busiest(ctx, s.Target)
		name = r.w.gws[i].name
		r.w.cl.proxies[i].cutLink()
		until := start.Add(time.Duration(s.N) * time.Second)
		rec, _ = r.waitConverged(ctx, start, until, i, false) // moved to the others while it is cut off
		for_(time.Until(until))
		r.w.cl.proxies[i].heal()
	}
	if err != nil {
		done()
		return err
	}
	r.mu.Lock()
	r.note = fmt.Sprintf("hit %s at %s, it drove %d", name, start.Format("15:04:05.000"), moved)
	r.mu.Unlock()
	// Every sandbox Ready under one live node, and every node agreeing,
	// within the bound.
	r.check("ready-after-fault", 1)
	conv, why := r.waitConverged(ctx, start, time.Now().Add(clusterBound), -1, true)
	if conv < 0 {
		r.violate("ready-after-fault", "%s on %s at %s: not converged %s later (%s)", s.Kind, name, start.Format(time.TimeOnly), clusterBound, why)
	}
	if rec < 0 {
		rec = conv
	}
	done()
	r.nextWorksAll(ctx, s.Kind)
	r.countMoved(s.Kind, moved)
	r.count(s.Kind, 1, rec)
	return nil
}

// nextWorksAll: right after the cluster has converged, an exec in every
// sandbox ends with its own status (no excuse: nothing is failing now).
func (r *runner) nextWorksAll(ctx context.Context, k Kind) {
	var wg sync.WaitGroup
	for _, n := range r.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := r.w.exec(ctx, n, "exit 3")
			r.check("next-works", 1)
			if res.code != 3 {
				r.violate("next-works", "%s: the first exec after the cluster converged from a %s gave exit %d (stderr %q)", n, k, res.code, clip(res.err))
			}
		}()
	}
	wg.Wait()
}

func (r *runner) countMoved(k Kind, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.moved[k] += n
}

// clusterPoll is the monitor's look at a cluster: every live node's list
// at once, and the supervisor processes of the run.
func (r *runner) clusterPoll(ctx context.Context, t time.Time) {
	ls := r.w.listAll(ctx)
	sups := supervisorCounts(r.w.state)
	r.check("one-supervisor", len(r.names))
	for _, n := range r.names {
		if sups[n] > 1 {
			r.violate("one-supervisor", "%s has %d supervisor processes at %s", n, sups[n], t.Format("15:04:05.000"))
		}
	}
	// One owner: a sandbox two nodes both say they drive. A node stops
	// driving a third of a lease TTL before another can claim, so two
	// answers closer than that cannot both be true; polls that took
	// longer prove nothing and are counted apart.
	lo, hi := time.Time{}, time.Time{}
	by := map[string][]string{}
	answered := 0
	for _, l := range ls {
		if l.err != nil {
			continue
		}
		answered++
		if lo.IsZero() || l.sent.Before(lo) {
			lo = l.sent
		}
		if l.got.After(hi) {
			hi = l.got
		}
		for n := range l.driven() {
			by[n] = append(by[n], l.name)
		}
	}
	if answered >= 2 {
		r.mu.Lock()
		conclusive := hi.Sub(lo) < r.w.cl.ttl/3
		if conclusive {
			r.ownerPolls[0]++
		} else {
			r.ownerPolls[1]++
		}
		r.mu.Unlock()
		if conclusive {
			r.check("one-owner", len(r.names))
			for n, nodes := range by {
				if len(nodes) > 1 {
					r.violate("one-owner", "%s driven by %s at %s (answers within %s)", n, strings.Join(nodes, " and "),
						lo.Format("15:04:05.000"), hi.Sub(lo).Round(time.Millisecond))
				}
			}
		}
	}
	// No sandbox lost: every node that answered lists every sandbox.
	first := -1
	for k, l := range ls {
		if l.err != nil {
			continue
		}
		if first < 0 {
			first = k
		}
		seen := map[string]bool{}
		for _, st := range l.sbs {
			seen[st.Name] = true
		}
		r.check("no-sandbox-lost", len(r.names))
		for _, n := range r.names {
			if !seen[n] {
				r.violate("no-sandbox-lost", "%s missing from %s's list at %s", n, l.name, t.Format(time.TimeOnly))
			}
		}
	}
	if first >= 0 {
		r.quietReady(ls[first].sbs, t)
	}
}

// quietReady: quiet sandboxes are Ready whenever no fault that can touch
// them is in play.
func (r *runner) quietReady(l []*messages.SandboxStatus, t time.Time) {
	seen := map[string]string{}
	for _, st := range l {
		seen[st.Name] = st.Phase + " " + st.Reason
	}
	for _, n := range r.names {
		ph, ok := seen[n]
		if !ok || !r.quiet[n] {
			continue
		}
		r.check("quiet-stay-ready", 1)
		if ph != "Ready " && !r.excused(n, t.Add(-time.Second), time.Now()) {
			r.violate("quiet-stay-ready", "%s (only connection-level faults) was %s at %s", n, ph, t.Format(time.TimeOnly))
		}
	}
}

// supervisorCounts counts the supervisor processes of each sandbox of the
// run (command line `stockade supervisor --spec STATE/sandboxes/NAME/spec.json`).
// A child a supervisor forked and that has not exec'd yet (its sandbox's
// init, on the way) shows the same command line: it is not counted.
func supervisorCounts(state string) map[string]int {
	out := map[string]int{}
	prefix := filepath.Join(state, "sandboxes") + "/"
	ps := procs()
	sandboxOf := func(cmd string) string {
		_, spec, ok := strings.Cut(cmd, " supervisor --spec "+prefix)
		if !ok {
			return ""
		}
		name, _, _ := strings.Cut(spec, "/spec.json")
		return name
	}
	for _, p := range ps {
		name := sandboxOf(p.cmd)
		if name == "" || sandboxOf(ps[p.ppid].cmd) == name {
			continue
		}
		out[name]++
	}
	return out
}

// checkSupervisorLogs: no supervisor of a sandbox was refused because
// another one held its workspace lock (a second start that the lock, not
// the ownership, stopped).
func (r *runner) checkSupervisorLogs() {
	for _, n := range r.names {
		paths, _ := filepath.Glob(filepath.Join(r.w.state, "sandboxes", n, "logs", "*", "supervisor.log"))
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "another supervisor of sandbox") {
					r.violate("one-supervisor", "%s: a second supervisor was started and refused by the workspace lock: %s", n, clip(sc.Text()))
				}
			}
			_ = f.Close()
		}
		r.check("one-supervisor", 1)
	}
}

// restartsOf is a sandbox's restart counters and the node they are from
// ("" when unreadable).
func (r *runner) restartsOf(ctx context.Context, name string) (string, map[string]int64) {
	st, err := r.w.get(ctx, name)
	if err != nil || st.Workspace == "" { // not from its driving actor
		return "", nil
	}
	return st.Node, st.Restarts
}

// quietStep runs a connection-level step on a quiet sandbox of a cluster
// run: its restart counters (kept by the node driving it, which node
// faults change) must not move across the step.
func (r *runner) quietStep(ctx context.Context, s Step, name string, f func() error) error {
	node, before := r.restartsOf(ctx, name)
	if err := f(); err != nil {
		return err
	}
	node2, after := r.restartsOf(ctx, name)
	if node == "" || node2 != node {
		return nil // unreadable, or moved: nothing to compare
	}
	r.check("quiet-stay-ready", 1)
	for k, v := range after {
		if v != before[k] {
			r.violate("quiet-stay-ready", "%s: %s restarts %d -> %d on %s across a %s step", name, k, before[k], v, node, s.Kind)
		}
	}
	return nil
}
