package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a run.
type Options struct {
	// Binary is the stockade binary run as gateway, supervisor and client.
	Binary   string
	Scenario string // a name from Scenarios
	Seed     uint64
	// Duration bounds the injection phase; Faults ends it once that many
	// faults were injected (0: only Duration).
	Duration time.Duration
	Faults   int
	// Sandboxes is how many sandboxes do steady work (default 4).
	Sandboxes int
	// Settle is how long sandboxes get to be Ready after the faults stop
	// (default 60 s).
	Settle time.Duration
	// Dir is the run's directory (default a temp dir, removed after a
	// clean run).
	Dir string
	// Progress gets one line per step (nil: none).
	Progress io.Writer
	// Cluster runs 3 gateway nodes on a real etcd (started by the run,
	// /usr/bin/etcd) instead of one gateway on bbolt; scenarios with
	// cluster kinds need it.
	Cluster bool
	// LeaseTTL is the nodes' --lease-ttl (default 2 s).
	LeaseTTL time.Duration
}

// gatewayFlags are the gateway knobs of chaos runs: quick backoff, a short
// grace and a short stable period, so a run sees many recoveries.
func gatewayFlags() []string {
	return []string{"--backoff-scale", "0.05", "--session-grace", "4s", "--stable-after", "2s", "--start-timeout", "20s"}
}

// workloadSleep is the sandboxes' workload: sleep for this many seconds.
const workloadSleep = "1000001"

// Run runs a scenario and returns its report; an error means the run
// itself could not be carried out (a broken invariant is in the report).
func Run(ctx context.Context, o Options) (_ *Report, err error) {
	sc, err := ScenarioNamed(o.Scenario)
	if err != nil {
		return nil, err
	}
	if o.Sandboxes <= 0 {
		o.Sandboxes = 4
	}
	if sc.Cluster && !o.Cluster {
		return nil, fmt.Errorf("chaos: scenario %s needs a cluster run (--cluster)", sc.Name)
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.Sandboxes < 2 && sc.Loud > 0 {
		return nil, fmt.Errorf("chaos: scenario %s needs at least 2 sandboxes", sc.Name)
	}
	if o.Settle <= 0 {
		o.Settle = 60 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 2 * time.Minute
	}
	for _, tool := range []string{"curl", "dig", "bash", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("chaos: %s is needed inside the sandboxes and is not installed (Debian: apt-get install curl dnsutils bash coreutils)", tool)
		}
	}
	tmp := o.Dir == ""
	if tmp {
		if o.Dir, err = os.MkdirTemp("", "stockade-chaos-"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		if err := os.Chmod(o.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	w, err := newWorld(o.Binary, o.Dir)
	if err != nil {
		return nil, err
	}
	w.gwFlags = gatewayFlags()
	defer w.close()
	defer func() {
		if err != nil { // a run cut short leaves nothing running
			w.stopGateway()
			killRun(w.dir)
		}
	}()
	if o.Cluster {
		if w.cl, err = newEtcdWorld(ctx, o.Dir, clusterNodes, o.LeaseTTL); err != nil {
			return nil, err
		}
		if err = w.startCluster(ctx, clusterNodes); err != nil {
			return nil, err
		}
	}
	if err = w.startGateway(ctx); err != nil {
		return nil, err
	}
	steps := Plan(sc, o.Seed, o.Sandboxes, 100000)
	r := &runner{w: w, l: newLedger(), port: w.webPort, quiet: map[string]bool{}, stable: 2 * time.Second,
		recoverBy: 60 * time.Second, stats: map[Kind]*kindStats{}, excuses: map[string][]window{}, broken: map[string][]string{},
		made: map[string]bool{}, checks: map[string]int{}, policyRev: map[string]int{}, moved: map[Kind]int{}}
	for i := 0; i < o.Sandboxes; i++ {
		name := fmt.Sprintf("chaos-%d", i)
		r.names = append(r.names, name)
		r.quiet[name] = i < o.Sandboxes-min(sc.Loud, o.Sandboxes)
		res := w.cli(ctx, 90*time.Second, "create", name, "--policy", w.policy, "--restart", "on-failure", "--",
			"/bin/sh", "-c", "echo $$ > /sandbox/.workload.pid; exec sleep "+workloadSleep)
		if res.code != 0 {
			return nil, fmt.Errorf("chaos: create %s: exit %d: %s", name, res.code, clip(res.err))
		}
	}
	rep := &Report{Scenario: sc.Name, About: sc.About, Seed: o.Seed, Sandboxes: o.Sandboxes, Dir: o.Dir}
	if o.Cluster {
		rep.Cluster = &ClusterInfo{Nodes: clusterNodes, LeaseTTL: o.LeaseTTL.String()}
		// Creates spread over the nodes; every one is driven before the
		// faults start.
		if d, why := r.waitConverged(ctx, time.Now(), time.Now().Add(60*time.Second), -1, true); d < 0 {
			return nil, fmt.Errorf("chaos: the cluster's sandboxes are not Ready under one node each: %s", why)
		}
	}
	baseG, gerr := idleGoroutines(ctx, w, 0)
	if gerr != nil {
		return nil, gerr
	}

	// Steady work and the monitor run until the faults stop and the
	// sandboxes settle.
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range r.names {
		wk := &worker{w: w, l: r.l, sandbox: n, port: w.webPort, seq: r.nextSeq, excused: r.excused}
		wg.Add(1)
		go func() { defer wg.Done(); wk.run(workCtx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.monitor(workCtx) }()

	start := time.Now()
	deadline := start.Add(o.Duration)
	var used []Step
	for _, s := range steps {
		if ctx.Err() != nil || time.Now().After(deadline) || (o.Faults > 0 && r.injectedTotal() >= o.Faults) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.Pause):
		}
		if err = r.step(ctx, s); err != nil {
			stopWork()
			wg.Wait()
			return nil, fmt.Errorf("chaos: step %d (%s on %d): %w", s.Seq, s.Kind, s.Target, err)
		}
		used = append(used, s)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%s step %d %s target %d n %d%s: %d faults injected so far, %s\n", time.Now().Format("15:04:05.000"),
				s.Seq, s.Kind, s.Target, s.N, r.takeNote(), r.injectedTotal(), time.Since(start).Round(time.Second))
		}
	}
	rep.Steps, rep.Fingerprint, rep.Injecting = len(used), Fingerprint(used), time.Since(start).Round(time.Millisecond).String()

	// Settle: every sandbox Ready again within o.Settle.
	settleStart := time.Now()
	r.recoverBy = o.Settle
	rep.SettledIn = r.waitAllReady(ctx, settleStart, "settled").Round(time.Millisecond).String()
	stopWork()
	wg.Wait()

	r.checkWorkspaces()
	if o.Cluster {
		r.checkSupervisorLogs()
	}
	r.checkAudit()
	r.checkQuiet(ctx)
	r.checkPolicies(ctx)
	// Slack: the idle count moves by a few (timers, the metrics scrape,
	// remote endpoints of clients that just exited, which protoactor
	// retires after its reconnect attempts); a leak grows with the
	// faults and stays.
	limit := baseG + baseG/5 + 10
	if o.Cluster {
		// And a cluster's mesh: a node keeps a remote endpoint (an
		// outgoing and an incoming gRPC connection, about 12 goroutines)
		// to every live supervisor it ever drove and every other node it
		// forwarded to; at the start each node knows only its own. That
		// is bounded by nodes x (sandboxes + nodes - 1); a leak grows with
		// the faults (the long run has hundreds).
		limit += 12 * clusterNodes * (o.Sandboxes + clusterNodes - 1)
	}
	if g, err := idleGoroutines(ctx, w, limit); err != nil {
		r.violate("no-goroutine-leak", "gateway goroutines unreadable: %v", err)
	} else {
		rep.Goroutines = [2]int{baseG, g}
		r.check("no-goroutine-leak", 1)
		if g > limit {
			why := "the stacks: goroutines-NODE.txt in the run dir"
			if top, err := w.goroutineDump(ctx, w.dir); err != nil {
				why = fmt.Sprintf("no stacks: %v", err)
			} else {
				why = "largest groups: " + strings.Join(top, "; ") + " (all in goroutines-NODE.txt in the run dir)"
			}
			r.violate("no-goroutine-leak", "gateway goroutines idle before %d, after %d (lowest in 30 s; limit %d); %s", baseG, g, limit, why)
		}
	}
	// A graceful gateway restart: the persisted state must bring every
	// sandbox back to Ready.
	w.stopGateway()
	if err := w.startGateway(ctx); err != nil {
		r.violate("restart-converges", "gateway restart after the run: %v", err)
	} else if r.recoverBy = 30 * time.Second; r.waitAllReady(ctx, time.Now(), "restart-converges") < 0 {
		r.violate("restart-converges", "not every sandbox Ready 30 s after a clean gateway restart")
	}
	if r.anyBroken() {
		r.keepLogs() // the delete below removes them
	}
	r.shutdown(ctx)
	r.fill(rep)
	if tmp && rep.OK() {
		_ = os.RemoveAll(o.Dir)
		rep.Dir = ""
	}
	return rep, nil
}

// killRun SIGKILLs every process of a run (its command line names the
// run's dir: gateways, supervisors, etcd): supervisors die, and with them
// their sandboxes.
func killRun(dir string) {
	for pid, p := range procs() {
		if ofRun(pid, p.cmd, dir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// idleGoroutines reads the gateway's goroutine count once it is idle: the
// lowest of a few samples; with a limit, it keeps sampling (up to 30 s)
// until the count is at or below it.
func idleGoroutines(ctx context.Context, w *world, limit int) (int, error) {
	best := -1
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		time.Sleep(300 * time.Millisecond)
		if g, err := w.goroutines(ctx); err != nil {
			last = err
		} else if best < 0 || g < best {
			best = g
		}
		done := i >= 4 && (limit <= 0 || (best >= 0 && best <= limit))
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if best < 0 {
		return 0, last
	}
	return best, nil
}

// monitor polls the sandboxes: none may vanish, and quiet ones (only
// connection-level faults) must stay Ready whenever the gateway answers
// and no gateway-level fault is playing out.
func (r *runner) monitor(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		if i%3 == 0 {
			r.mu.Lock()
			sandboxNamespaces(r.w.state, r.made)
			r.mu.Unlock()
		}
		t := time.Now()
		if r.w.cl != nil {
			r.clusterPoll(ctx, t)
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
			continue
		}
		l, err := r.w.list(ctx)
		if err == nil {
			seen := map[string]string{}
			for _, st := range l {
				seen[st.Name] = st.Phase + " " + st.Reason
			}
			r.check("no-sandbox-lost", len(r.names))
			for _, n := range r.names {
				ph, ok := seen[n]
				if !ok {
					r.violate("no-sandbox-lost", "%s missing from list at %s", n, t.Format(time.TimeOnly))
					continue
				}
				if !r.quiet[n] {
					continue
				}
				r.check("quiet-stay-ready", 1)
				if ph != "Ready " && !r.excused(n, t.Add(-time.Second), time.Now()) {
					r.violate("quiet-stay-ready", "%s (only connection-level faults) was %s at %s", n, ph, t.Format(time.TimeOnly))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// shutdown deletes every sandbox, stops the gateway and checks that no
// process of the run and no namespace it made is left.
func (r *runner) shutdown(ctx context.Context) {
	r.mu.Lock()
	sandboxNamespaces(r.w.state, r.made)
	made := len(r.made)
	r.mu.Unlock()
	if made == 0 {
		r.violate("no-orphans", "no sandbox namespace was ever seen: the check would prove nothing")
	}
	for _, n := range r.names {
		if res := r.w.cli(ctx, 60*time.Second, "delete", n); res.code != 0 {
			r.violate("clean-shutdown", "delete %s: exit %d: %s", n, res.code, clip(res.err))
		}
		r.check("clean-shutdown", 1)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l, err := r.w.list(ctx); err == nil && len(l) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.w.stopGateway()
	if r.w.cl != nil {
		_ = r.w.cl.etcd.Stop()
	}
	var left []string
	for time.Now().Before(deadline) {
		r.mu.Lock()
		left = leftovers(r.w.dir, r.made)
		r.mu.Unlock()
		if len(left) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.check("no-orphans", made)
	for _, x := range left {
		r.violate("no-orphans", "%s", x)
	}
}
