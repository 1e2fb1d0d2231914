package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stockade-dev/stockade/internal/testworld"
	"github.com/stockade-dev/stockade/messages"
)

// runner executes a schedule against a world.
type runner struct {
	w         *world
	l         *ledger
	names     []string
	quiet     map[string]bool
	port      int
	seqMu     sync.Mutex
	seqN      int
	stable    time.Duration // the gateway's --stable-after
	recoverBy time.Duration // how long a recovery may take before it is a violation

	mu        sync.Mutex
	stats     map[Kind]*kindStats
	excuses   map[string][]window // per sandbox: process-level fault windows
	broken    map[string][]string // invariant name -> violations
	checks    map[string]int      // invariant name -> how many things it checked
	made      map[string]bool     // namespaces the run's sandboxes were seen in
	policyRev map[string]int      // policy reloads per sandbox
	malformed [2]int              // malformed proxy requests sent, answered 4xx
	// Cluster runs: sandboxes the hit node drove, per kind; one-owner
	// polls conclusive and not (answers spread over a third of a TTL).
	moved      map[Kind]int
	ownerPolls [2]int
	note       string // what the last step hit, for the progress line
}

// takeNote returns and clears the last step's note (" (...)" or "").
func (r *runner) takeNote() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.note
	r.note = ""
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// check records how many items an invariant looked at.
func (r *runner) check(inv string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[inv] += n
}

type kindStats struct {
	steps    int
	injected int
	recovery []time.Duration
}

func (r *runner) nextSeq() int {
	r.seqMu.Lock()
	defer r.seqMu.Unlock()
	r.seqN++
	return r.seqN
}

func (r *runner) violate(inv, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.broken[inv]) < 50 {
		r.broken[inv] = append(r.broken[inv], fmt.Sprintf(format, args...))
	} else if len(r.broken[inv]) == 50 {
		r.broken[inv] = append(r.broken[inv], "... (more)")
	}
}

func (r *runner) count(k Kind, injected int, rec time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats[k]
	if s == nil {
		s = &kindStats{}
		r.stats[k] = s
	}
	s.steps++
	s.injected += injected
	if rec >= 0 {
		s.recovery = append(s.recovery, rec)
	}
}

func (r *runner) injectedTotal() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.stats {
		n += s.injected
	}
	return n
}

// excuse opens a window in which a sandbox's execs may end with a clear
// error; the returned func closes it.
func (r *runner) excuse(name string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.excuses[name])
	r.excuses[name] = append(r.excuses[name], window{from: time.Now()}) // open: no end yet
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.excuses[name][i].to = time.Now().Add(time.Second)
	}
}

func (r *runner) excused(name string, from, to time.Time) bool {
	if r.w.downDuring(from, to) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.excuses[name] {
		if x.from.Before(to) && (x.to.IsZero() || x.to.After(from)) {
			return true
		}
	}
	return false
}

// step runs one scheduled fault.
func (r *runner) step(ctx context.Context, s Step) error {
	name := ""
	if s.Target >= 0 && !s.Kind.Cluster() && !(s.Kind == KindGatewayKill && r.w.cl != nil) {
		name = r.names[s.Target]
	}
	if r.w.cl != nil && s.Kind.Local() && r.quiet[name] {
		return r.quietStep(ctx, s, name, func() error { return r.inject(ctx, s, name) })
	}
	return r.inject(ctx, s, name)
}

func (r *runner) inject(ctx context.Context, s Step, name string) error {
	switch s.Kind {
	case KindIdentityError, KindIdentityPanic, KindPolicyDecideError:
		return r.proxyBurst(ctx, s, name)
	case KindDNSUpstreamError, KindDNSUpstreamTimeout, KindDNSQueryPanic:
		return r.dnsBurst(ctx, s, name)
	case KindMalformedProxy:
		return r.malformedProxy(ctx, s, name)
	case KindMalformedDNS:
		return r.malformedDNS(ctx, s, name)
	case KindRelayCut:
		return r.relayCut(ctx, s, name)
	case KindPolicyReload:
		return r.policyReload(ctx, s, name)
	case KindNodeKill, KindNodeStop, KindEtcdKill, KindEtcdCut:
		return r.clusterFault(ctx, s)
	case KindGatewayKill:
		if r.w.cl != nil {
			return r.clusterFault(ctx, s)
		}
		return r.processFault(ctx, s, name)
	default:
		return r.processFault(ctx, s, name)
	}
}

// armed arms rule in a sandbox, runs f, disarms and returns how often the
// point fired in between.
func (r *runner) armed(ctx context.Context, name, point, rule string, f func()) (int, error) {
	// A sandbox between supervisors has no session to arm: wait for one.
	var before int
	var err error
	for deadline := time.Now().Add(r.recoverBy); ; {
		if before, err = r.w.fault(ctx, name, point+"="+rule); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, err
	}
	f()
	// Disarm (in a cluster the request may meet a node that is changing
	// its view for a moment: retry).
	var after int
	for deadline := time.Now().Add(r.recoverBy); ; {
		if after, err = r.w.fault(ctx, name, point+"=off"); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

// proxyBurst arms an identity or policy fault for N calls and sends N
// requests (denied hosts for identity faults, the allowed host for policy
// faults); each must come back as a clean 403, audited.
func (r *runner) proxyBurst(ctx context.Context, s Step, name string) error {
	point, rule := "identity.lookup", fmt.Sprintf("error:%d", s.N)
	switch s.Kind {
	case KindIdentityPanic:
		rule = fmt.Sprintf("panic:%d", s.N)
	case KindPolicyDecideError:
		point = "policy.decide"
	}
	seq := r.nextSeq()
	var b strings.Builder
	for i := 0; i < s.N; i++ {
		host := fmt.Sprintf("burst-%d-%d.test", seq, i)
		if s.Kind == KindPolicyDecideError {
			host = "api.test"
		}
		fmt.Fprintf(&b, "echo \"B %s $(curl -s -m 10 http://%s:%d/)\"\n", host, host, r.port)
	}
	var res cliResult
	fired, err := r.armed(ctx, name, point, rule, func() { res = r.w.exec(ctx, name, b.String()) })
	if err != nil {
		return err
	}
	if r.l.outcome(name, 0, res, r.excused(name, res.start, res.start.Add(res.took))) {
		for _, line := range strings.Split(res.out, "\n") {
			if rest, ok := strings.CutPrefix(line, "B "); ok {
				host, body, _ := strings.Cut(rest, " ")
				r.check("denials-clean", 1)
				if why, ok := denial403(body); ok {
					r.l.denial(name, host+"|"+why)
				} else if host != "api.test" || !strings.HasPrefix(body, "upstream says hi") {
					r.violate("denials-clean", "%s: %s under %s=%s answered %q, not a clean 403", name, host, point, rule, clip(body))
				}
			}
		}
	}
	r.count(s.Kind, fired, r.probe(ctx, name, "proxy"))
	return nil
}

// dnsBurst arms a DNS fault for N queries and asks N allowed names; each
// gets SERVFAIL (never a hang or a dead server).
func (r *runner) dnsBurst(ctx context.Context, s Step, name string) error {
	point, rule := "dns.upstream", fmt.Sprintf("error:%d", s.N)
	switch s.Kind {
	case KindDNSUpstreamTimeout:
		rule = fmt.Sprintf("delay/4500ms:%d", s.N) // past the boundary's 4 s upstream timeout
	case KindDNSQueryPanic:
		point, rule = "dns.query", fmt.Sprintf("panic:%d", s.N)
	}
	var b strings.Builder
	for i := 0; i < s.N; i++ {
		fmt.Fprintf(&b, "dig +tries=1 +time=10 api.test A | grep -o 'status: [A-Z]*' &\n")
	}
	b.WriteString("wait\n")
	var res cliResult
	fired, err := r.armed(ctx, name, point, rule, func() { res = r.w.exec(ctx, name, b.String()) })
	if err != nil {
		return err
	}
	r.l.outcome(name, 0, res, r.excused(name, res.start, res.start.Add(res.took)))
	r.count(s.Kind, fired, r.probe(ctx, name, "dns"))
	return nil
}

// badRequests are malformed proxy requests, one connection each, sent
// through bash's /dev/tcp.
func badRequests() []string {
	return []string{
		`GARBAGE\r\n\r\n`,
		`GET\r\n\r\n`,
		`CONNECT nohost HTTP/1.1\r\n\r\n`,
		`CONNECT api.test:99999 HTTP/1.1\r\n\r\n`,
		`GET /relative HTTP/1.1\r\nHost: api.test\r\n\r\n`,
		`\x16\x03\x01\x00\x05hello\r\n\r\n`,
		`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`,
		`GET http://api.test:1:2/ HTTP/1.1\r\n\r\n`,
	}
}

func (r *runner) malformedProxy(ctx context.Context, s Step, name string) error {
	var b strings.Builder
	b.WriteString("trap '' PIPE\nok=0\n") // the proxy may close before a request is fully sent
	bad := badRequests()
	for i := 0; i < s.N; i++ {
		fmt.Fprintf(&b, "exec 3<>/dev/tcp/127.0.0.1/3128 && { printf '%s' >&3; timeout 3 head -c 12 <&3 | grep -q '^HTTP/1.1 4' && ok=$((ok+1)); exec 3<&-; }\n",
			bad[i%len(bad)])
	}
	b.WriteString("echo \"M $ok\"\n")
	res := r.w.exec(ctx, name, "exec /bin/bash -c "+shellQuote(b.String()))
	if r.l.outcome(name, 0, res, r.excused(name, res.start, res.start.Add(res.took))) {
		for _, line := range strings.Split(res.out, "\n") {
			if v, ok := strings.CutPrefix(line, "M "); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				r.mu.Lock()
				r.malformed[0] += s.N
				r.malformed[1] += n
				r.mu.Unlock()
			}
		}
	}
	r.count(s.Kind, s.N, r.probe(ctx, name, "proxy"))
	return nil
}

func (r *runner) malformedDNS(ctx context.Context, s Step, name string) error {
	var b strings.Builder
	b.WriteString("trap '' PIPE\n")
	for i := 0; i < s.N; i++ {
		// Truncated headers, garbage, a header claiming questions it lacks.
		pkts := []string{`\x12`, `garbage-%d`, `\x00\x01\x01\x00\x00\x05\x00\x00\x00\x00\x00\x00`}
		fmt.Fprintf(&b, "printf '%s' %d > /dev/udp/127.0.0.1/53\n", pkts[i%len(pkts)], i)
	}
	res := r.w.exec(ctx, name, "exec /bin/bash -c "+shellQuote(b.String()))
	r.l.outcome(name, 0, res, r.excused(name, res.start, res.start.Add(res.took)))
	r.count(s.Kind, s.N, r.probe(ctx, name, "dns"))
	return nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// probe is "the next one works": an allowed request (or lookup) right
// after a fault, through a fresh exec. It returns the time it took, or -1.
func (r *runner) probe(ctx context.Context, name, what string) time.Duration {
	script := fmt.Sprintf("curl -s -m 10 -o /dev/null -w '%%{http_code}' http://api.test:%d/", r.port)
	want := "200"
	if what == "dns" {
		script, want = "dig +tries=1 +time=8 api.test A | grep -o 'status: [A-Z]*'", "status: NOERROR"
	}
	start := time.Now()
	res := r.w.exec(ctx, name, script)
	took := time.Since(start)
	r.check("next-works", 1)
	if res.code == 0 && strings.TrimSpace(res.out) == want {
		return took
	}
	if !r.excused(name, start, time.Now()) {
		r.violate("next-works", "%s: after a %s fault the next %s attempt gave exit %d, %q (stderr %q)", name, what, what, res.code, clip(res.out), clip(res.err))
	}
	return -1
}

// policyReload sets a new policy version (same rules, a new name) while
// the sandbox's traffic runs; nothing may break, and the version must be
// the one the sandbox reports at the end.
func (r *runner) policyReload(ctx context.Context, s Step, name string) error {
	r.mu.Lock()
	r.policyRev[name]++
	rev := r.policyRev[name] + 1
	r.mu.Unlock()
	file := filepath.Join(r.w.dir, fmt.Sprintf("policy-%s-v%d.yaml", name, rev))
	if err := os.WriteFile(file, []byte(policyText(r.port, rev)), 0o644); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	addr := r.w.gatewayArg()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, r.w.bin, "policy", "set", name, file, "--state-dir", r.w.state, "--gateway", addr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("policy version %d", rev)) {
		r.violate("policy-kept", "%s: policy set version %d: %v: %s", name, rev, err, clip(string(out)))
	}
	r.count(s.Kind, 1, r.probe(ctx, name, "proxy"))
	return nil
}

// relayCut kills an exec client mid-stream; the sandbox stays Ready and
// the next exec works.
func (r *runner) relayCut(ctx context.Context, s Step, name string) error {
	addr := r.w.gatewayArg()
	cmd := exec.CommandContext(ctx, r.w.bin, "sandbox", "--state-dir", r.w.state, "--gateway", addr,
		"exec", name, "--", "/bin/sh", "-c", "echo begin; sleep 5; echo end")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("chaos: relay cut: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: relay cut: %w", err)
	}
	buf := make([]byte, 6)
	n, _ := out.Read(buf) // "begin\n" once the relay is up
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	injected := 0
	if strings.HasPrefix(string(buf[:n]), "begin") {
		injected = 1
	}
	start := time.Now()
	res := r.w.exec(ctx, name, "exit 3")
	rec := time.Duration(-1)
	if res.code == 3 {
		rec = time.Since(start)
	} else if !r.excused(name, start, time.Now()) {
		r.violate("next-works", "%s: after a relay cut the next exec gave exit %d (stderr %q)", name, res.code, clip(res.err))
	}
	r.count(s.Kind, injected, rec)
	return nil
}

// processFault hits a supervisor, workload, session, store or the gateway
// and waits for recovery.
func (r *runner) processFault(ctx context.Context, s Step, name string) error {
	if name != "" {
		r.waitStable(ctx, name)
	}
	start := time.Now()
	var closers []func()
	for _, n := range r.names {
		if n == name || name == "" { // gateway-level faults can cut every sandbox's execs
			closers = append(closers, r.excuse(n))
		}
	}
	done := func() {
		for _, c := range closers {
			c()
		}
	}
	injected := 1
	var err error
	switch s.Kind {
	case KindSupervisorKill, KindSupervisorStop:
		st, gerr := r.w.get(ctx, name)
		if gerr != nil || st.SupervisorPid <= 0 {
			injected = 0
			break
		}
		pid := int(st.SupervisorPid)
		if !isSupervisor(pid, r.w.state) {
			err = fmt.Errorf("chaos: pid %d is not %s's supervisor", pid, name)
			break
		}
		if s.Kind == KindSupervisorKill {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(s.N) * time.Second):
		}
		_ = syscall.Kill(pid, syscall.SIGCONT)
	case KindSessionCut:
		if _, err = r.w.fault(ctx, name, fmt.Sprintf("session.silence=error:%d", s.N)); err == nil {
			select { // the cut plays out before recovery is judged
			case <-ctx.Done():
			case <-time.After(time.Duration(s.N) * time.Second):
			}
		}
	case KindWorkloadCrash:
		if !r.crashWorkload(ctx, name) {
			injected = 0
		}
	case KindStoreWriteError:
		// The next store write fails; a workload crash makes one. In a
		// cluster the write is made by the node driving the sandbox: the
		// fault is armed there.
		loud, node := r.names[len(r.names)-1], -1
		if r.w.cl != nil {
			r.waitStable(ctx, loud)
			node = r.driverOf(ctx, loud)
		}
		before, ferr := r.w.gatewayFault(ctx, node, "store.write=error:1")
		if ferr != nil {
			return ferr
		}
		r.waitStable(ctx, loud)
		ldone := r.excuse(loud)
		// Recovery is judged from the crash: a loss earlier in the step
		// (a gateway restart just before it) would pass for it while
		// the sandbox is still Ready, and close the excuse too soon.
		crashed := time.Now()
		if r.crashWorkload(ctx, loud) {
			r.waitRecovered(ctx, loud, crashed, Step{Kind: KindWorkloadCrash})
		}
		ldone()
		after, ferr := r.w.gatewayFault(ctx, node, "store.write=off")
		if ferr != nil {
			return ferr
		}
		injected = after - before
	case KindGatewayKill:
		r.w.killGateway()
		err = r.w.startGateway(ctx)
	}
	if err != nil {
		return err
	}
	var rec time.Duration
	if name != "" {
		rec = r.waitRecovered(ctx, name, start, s)
	} else {
		rec = r.waitAllReady(ctx, start, "recovered")
	}
	done()
	r.count(s.Kind, injected, rec)
	return nil
}

// crashWorkload SIGKILLs a sandbox's workload from the host (an exec
// cannot: Landlock scopes signals to its own domain). The pid is checked
// first: the workload's command, and its pid inside the sandbox equal to
// what it wrote into its workspace.
func (r *runner) crashWorkload(ctx context.Context, name string) bool {
	st, err := r.w.get(ctx, name)
	if err != nil || st.WorkloadPid <= 0 {
		return false
	}
	pid := strconv.Itoa(int(st.WorkloadPid))
	cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	inner, _ := os.ReadFile(filepath.Join(r.w.state, "sandboxes", name, "workspace", ".workload.pid"))
	var nspid []string
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			nspid = strings.Fields(v)
		}
	}
	if !strings.Contains(string(cmd), workloadSleep) || len(nspid) < 2 || nspid[len(nspid)-1] != strings.TrimSpace(string(inner)) {
		return false
	}
	return syscall.Kill(int(st.WorkloadPid), syscall.SIGKILL) == nil
}

// isSupervisor checks a pid is a supervisor of this run before signalling.
func isSupervisor(pid int, state string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && testworld.IsSupervisorOf(b, state)
}

// waitStable waits until a sandbox has been Ready for the gateway's
// stable-after period, so chained faults test recovery, not the crash-loop
// limit (which the recovery matrix test covers).
func (r *runner) waitStable(ctx context.Context, name string) {
	deadline := time.Now().Add(r.recoverBy)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		st, err := r.w.get(ctx, name)
		if err == nil && st.Phase == "Ready" && time.Since(time.UnixMilli(st.SinceUnixMs)) > r.stable+200*time.Millisecond && st.RecoveryAttempts == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRecovered waits until a sandbox hit by a process-level fault is
// Ready again after it; the time from the fault is its recovery time.
func (r *runner) waitRecovered(ctx context.Context, name string, since time.Time, s Step) time.Duration {
	deadline := time.Now().Add(r.recoverBy)
	// A stop or cut shorter than the gateway's 3 s heartbeat limit leaves
	// the session up; one of 4 s or more always loses it (the schedule
	// never picks 3 s, the boundary case).
	expectLoss := !((s.Kind == KindSupervisorStop || s.Kind == KindSessionCut) && s.N < 4)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		st, err := r.w.get(ctx, name)
		if err == nil && st.Phase == "Ready" && (!expectLoss || lostSince(st, since)) {
			r.check("recovered", 1)
			return time.Since(since)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, _ := r.w.get(ctx, name)
	r.violate("recovered", "%s: not Ready %s after %s (phase %s %s: %s)", name, r.recoverBy, s.Kind, st.GetPhase(), st.GetReason(), st.GetMessage())
	return -1
}

// lostSince: the sandbox left Ready after since and came back.
func lostSince(st *messages.SandboxStatus, since time.Time) bool {
	for _, t := range st.Transitions {
		if t.From == "Ready" && t.AtUnixMs >= since.UnixMilli()-1000 {
			return true
		}
	}
	return false
}

// waitAllReady waits until every sandbox is Ready (in a cluster: under
// one live node, every live node agreeing).
func (r *runner) waitAllReady(ctx context.Context, since time.Time, inv string) time.Duration {
	if r.w.cl != nil {
		d, why := r.waitConverged(ctx, since, time.Now().Add(r.recoverBy), -1, true)
		if d < 0 {
			r.violate(inv, "not all sandboxes Ready under one node %s after %s (last: %s)", r.recoverBy.Round(time.Second), inv, why)
		} else {
			r.check(inv, 1)
		}
		return d
	}
	deadline := time.Now().Add(r.recoverBy)
	var last string
	for ctx.Err() == nil && time.Now().Before(deadline) {
		l, err := r.w.list(ctx)
		if err == nil {
			ready := 0
			for _, st := range l {
				if st.Phase == "Ready" {
					ready++
				} else {
					last = st.Name + " " + st.Phase + " " + st.Reason
				}
			}
			if ready == len(r.names) && len(l) == len(r.names) {
				r.check(inv, 1)
				return time.Since(since)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.violate(inv, "not all sandboxes Ready %s after %s (last: %s)", r.recoverBy.Round(time.Second), inv, last)
	return -1
}
