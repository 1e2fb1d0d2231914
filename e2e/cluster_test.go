package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/etcdtest"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/internal/testworld"
	"github.com/stockade-dev/stockade/trust"
)

// clusterWorld is a real etcd and gateway nodes on this host sharing one
// state dir (the nodes of a host share its sandboxes), with the world's
// upstream and policy.
type clusterWorld struct {
	*world
	etcd  *etcdtest.Server
	nodes []*clusterNode
	// extra are more `gateway run` flags for every node.
	extra []string
}

type clusterNode struct {
	name string
	// state and host: another host's node (default: the world's state
	// dir, and this machine's hostname).
	state, host string
	addr        string // kept across restarts: supervisors and clients know it
	proc        *testworld.Process
}

func newClusterWorld(t testing.TB, n int, extra ...string) *clusterWorld {
	t.Helper()
	w := prepareWorld(t, 0)
	pki := filepath.Join(w.state, "pki")
	if out, err := exec.Command(bin, "cluster", "init", pki).CombinedOutput(); err != nil {
		t.Fatalf("cluster init: %v\n%s", err, out)
	}
	// etcd as an operator runs it: mutual TLS with what cluster init made,
	// client certificates required (the nodes refuse plain http unless
	// told --etcd-insecure).
	et := filepath.Join(pki, trust.EtcdDir)
	files := &etcdtest.TLSFiles{CA: filepath.Join(et, trust.CACertFile),
		ServerCert: filepath.Join(et, trust.EtcdServerCert), ServerKey: filepath.Join(et, trust.EtcdServerKey),
		ClientCert: filepath.Join(et, trust.EtcdClientCert), ClientKey: filepath.Join(et, trust.EtcdClientKey)}
	c := &clusterWorld{world: w, etcd: etcdtest.StartWithTLS(t, files), extra: append([]string{
		"--etcd-cacert", files.CA, "--etcd-cert", files.ClientCert, "--etcd-key", files.ClientKey}, extra...)}
	for i := range n {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("n%d", i+1)})
	}
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.start(nd) }()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.proc != nil {
				_ = nd.proc.Stop(10 * time.Second)
			}
		}
		for _, pid := range testworld.SupervisorsOf(w.state) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = testworld.RemoveGroupsOf(w.state, 3*time.Second)
	})
	c.addr = c.nodes[0].addr
	return c
}

// start starts (or restarts on its address) a node.
func (c *clusterWorld) start(nd *clusterNode) {
	c.t.Helper()
	listen := "127.0.0.1:0"
	if nd.addr != "" {
		listen = nd.addr
	}
	state := c.state
	if nd.state != "" {
		state = nd.state
	}
	args := []string{"gateway", "run", "--etcd", c.etcd.Endpoint, "--node", nd.name, "--state-dir", state, "--listen", listen,
		"--hosts", c.hosts, "--allow-loopback-upstream", "--log-format", "json", "--metrics", "127.0.0.1:0"}
	if nd.host != "" {
		args = append(args, "--host-id", nd.host)
	}
	args = append(args, c.extra...)
	p := testworld.Start(c.t, testworld.Spec{Bin: bin, Args: args, Name: "gateway-" + nd.name, Timeout: 30 * time.Second, RetryInUse: 10 * time.Second})
	nd.proc, nd.addr = p, p.Addrs.API
}

// via runs a client verb through one node.
func (c *clusterWorld) via(nd *clusterNode, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(bin, append([]string{"sandbox", "--state-dir", c.state}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+nd.addr)
	return runCmd(c.t, cmd)
}

// list is `sandbox list -o json` through a node (nil when it fails).
func (c *clusterWorld) list(nd *clusterNode) []status {
	c.t.Helper()
	out, _, code := c.via(nd, "list", "-o", "json")
	if code != 0 {
		return nil
	}
	var l []status
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		c.t.Fatalf("list through %s: %v\n%s", nd.name, err, out)
	}
	return l
}

func (c *clusterWorld) alive() []*clusterNode {
	var out []*clusterNode
	for _, nd := range c.nodes {
		if nd.proc != nil {
			out = append(out, nd)
		}
	}
	return out
}

// driven asks each live node which sandboxes it drives itself (its own
// actors answer with its name) and fails the test if two nodes drive one.
func (c *clusterWorld) driven() map[string]string {
	c.t.Helper()
	by := map[string]string{}
	for _, nd := range c.alive() {
		for _, s := range c.list(nd) {
			if s.Node != nd.name || s.WorkloadPid == 0 && s.Phase != "Ready" {
				continue
			}
			// A node's list shows its own sandboxes from its actors; a
			// sandbox another node drives shows that node's name.
			if prev, ok := by[s.Name]; ok && prev != nd.name {
				c.t.Fatalf("sandbox %s is driven by two nodes: %s and %s", s.Name, prev, nd.name)
			}
			by[s.Name] = nd.name
		}
	}
	return by
}

// supervisorCount counts the supervisor processes of each sandbox.
func (c *clusterWorld) supervisorCount() map[string]int {
	out := map[string]int{}
	for _, pid := range testworld.SupervisorsOf(c.state) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		for _, a := range strings.Split(string(b), "\x00") {
			if strings.HasSuffix(a, "spec.json") {
				out[filepath.Base(filepath.Dir(a))]++
			}
		}
	}
	return out
}

// createMany creates n sandboxes through the first node (placement spreads
// them) and waits until every one is Ready.
func (c *clusterWorld) createMany(prefix string, n int) map[string]status {
	c.t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		out, errOut, code := c.via(c.nodes[0], "create", name, "--no-wait", "--policy", c.policy, "--",
			"/bin/sh", "-c", "echo kept > /sandbox/kept; exec sleep infinity")
		if code != 0 {
			c.t.Fatalf("create %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	return c.waitAll(prefix, n, 60*time.Second, nil)
}

// waitAll waits until n sandboxes named prefix* are Ready with an owner
// accepted by ok (nil: any), and returns them.
func (c *clusterWorld) waitAll(prefix string, n int, d time.Duration, ok func(status) bool) map[string]status {
	c.t.Helper()
	var last []status
	got := map[string]status{}
	testenv.Eventually(c.t, d, func() bool {
		last = c.list(c.alive()[0])
		clear(got)
		for _, s := range last {
			if strings.HasPrefix(s.Name, prefix) && s.Phase == "Ready" && s.Node != "" && (ok == nil || ok(s)) {
				got[s.Name] = s
			}
		}
		return len(got) == n
	}, "%d sandboxes %s* Ready (last list: %+v)", n, prefix, &last)
	return got
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestClusterFailover: 3 nodes; SIGKILL the node owning most sandboxes:
// every sandbox is driven by one survivor and Ready again within 5 s,
// with the same workload pids, its own host ids (none shared) and its
// workspace intact, while an exec
// through a survivor finishes with its own status. The killed node then
// rejoins and the next trial kills the node owning most again.
// STOCKADE_E2E_CLUSTER_SANDBOXES (default 30) and
// STOCKADE_E2E_FAILOVER_TRIALS (default 3; the figure is 10; when
// it is set, every trial must be within 5 s).
func TestClusterFailover(t *testing.T) {
	c := newClusterWorld(t, 3)
	n, trials := envInt("STOCKADE_E2E_CLUSTER_SANDBOXES", 30), envInt("STOCKADE_E2E_FAILOVER_TRIALS", 3)
	sbs := c.createMany("f", n)
	var took []time.Duration
	for trial := range trials {
		victim, count := c.busiest(sbs)
		var survivor *clusterNode
		var onSurvivor string
		for _, s := range sbs {
			if s.Node != victim.name {
				onSurvivor = s.Name
				survivor = c.node(s.Node)
				break
			}
		}
		// An exec through a survivor, on a sandbox it drives: its status
		// comes back across the kill.
		type execRes struct {
			out  string
			code int
		}
		execDone := make(chan execRes, 1)
		if survivor != nil {
			go func() {
				out, errOut, code := c.via(survivor, "exec", onSurvivor, "--", "/bin/sh", "-c", "sleep 2; echo done; exit 7")
				execDone <- execRes{out + errOut, code}
			}()
			time.Sleep(300 * time.Millisecond) // the exec is under way when the node dies
		}
		killed := time.Now()
		if err := victim.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		victim.proc = nil
		after := c.waitAll("f", n, 20*time.Second, func(s status) bool { return s.Node != victim.name })
		seen := time.Since(killed)
		d := failoverTime(t, sbs, after, victim.name, killed)
		took = append(took, d)
		t.Logf("trial %d: killed %s (owned %d of %d); all Ready under survivors after %s (seen by the test's list after %s)",
			trial+1, victim.name, count[victim.name], n, d.Round(10*time.Millisecond), seen.Round(10*time.Millisecond))
		owners := c.driven()
		ranges := map[string]string{} // hostIds -> sandbox: nodes of one host never give one range twice
		for name, s := range sbs {
			a := after[name]
			if a.WorkloadPid != s.WorkloadPid {
				t.Errorf("%s: workload pid %d before the kill, %d after (restarted)", name, s.WorkloadPid, a.WorkloadPid)
			}
			if a.HostIDs == "" || a.HostIDs != s.HostIDs {
				t.Errorf("%s: host ids %q before the kill, %q after", name, s.HostIDs, a.HostIDs)
			}
			if other, ok := ranges[a.HostIDs]; ok {
				t.Errorf("%s and %s share host ids %s", name, other, a.HostIDs)
			}
			ranges[a.HostIDs] = name
			if owners[name] == "" || owners[name] == victim.name {
				t.Errorf("%s: driven by %q after the kill", name, owners[name])
			}
			if b, err := os.ReadFile(filepath.Join(c.state, "sandboxes", name, "workspace", "kept")); err != nil || string(b) != "kept\n" {
				t.Errorf("%s: workspace file after the kill: %q, %v", name, b, err)
			}
		}
		for name, k := range c.supervisorCount() {
			if k != 1 {
				t.Errorf("%s has %d supervisors", name, k)
			}
		}
		if survivor != nil {
			select {
			case r := <-execDone:
				if r.code != 7 || !strings.Contains(r.out, "done") {
					t.Errorf("exec through %s across the kill: exit %d, output %q; want 7 and done", survivor.name, r.code, r.out)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("exec through %s did not end", survivor.name)
			}
		}
		sbs = after
		c.start(victim) // rejoins; it drives what it is given from now on
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	p50, p99 := took[len(took)/2], took[len(took)-1]
	t.Logf("failover of %d sandboxes over %d trials: p50 %s, p99 %s (max)", n, trials, p50.Round(10*time.Millisecond), p99.Round(10*time.Millisecond))
	if os.Getenv("STOCKADE_E2E_FAILOVER_TRIALS") != "" {
		// The measured run (an idle machine): the bound.
		if p99 > 5*time.Second {
			t.Errorf("failover p99 %s: over 5 s", p99)
		}
		return
	}
	// make test shares two cores with every other package: the median
	// keeps the 5 s bound, a single trial gets twice that.
	if p50 > 5*time.Second || p99 > 10*time.Second {
		t.Errorf("failover p50 %s, max %s: want p50 <= 5 s and every trial <= 10 s", p50, p99)
	}
}

// failoverTime is the time from the kill of victim until the last
// sandbox it owned (in before) became Ready under a survivor (its since
// in after): the nodes' own figure, not when a test's next list (a CLI
// process, slow on a loaded machine) saw it.
func failoverTime(t testing.TB, before, after map[string]status, victim string, killed time.Time) time.Duration {
	t.Helper()
	var last time.Time
	for name, s := range before {
		if s.Node != victim {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, after[name].Since)
		if err != nil {
			t.Fatalf("%s: since %q: %v", name, after[name].Since, err)
		}
		if !at.After(killed) {
			t.Errorf("%s moved from %s but has been Ready since %s, before the kill at %s", name, victim, after[name].Since, killed.Format(time.RFC3339Nano))
		}
		if at.After(last) {
			last = at
		}
	}
	if last.IsZero() {
		t.Fatalf("no sandbox moved from %s", victim)
	}
	return last.Sub(killed)
}

func (c *clusterWorld) node(name string) *clusterNode {
	for _, nd := range c.nodes {
		if nd.name == name {
			return nd
		}
	}
	return nil
}

// TestClusterPausedNode: SIGSTOP a node for 20 s: its sandboxes move;
// once it wakes it drives none of them, and no sandbox ever has two
// supervisors. Its writes refused by the fencing check are counted from
// its log.
func TestClusterPausedNode(t *testing.T) {
	c := newClusterWorld(t, 3)
	const n = 9
	sbs := c.createMany("p", n)
	victim, count := c.busiest(sbs)
	if err := victim.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	proc := victim.proc
	victim.proc = nil // not asked while paused
	c.waitAll("p", n, 20*time.Second, func(s status) bool { return s.Node != victim.name })
	t.Logf("paused %s (owned %d): all moved after %s", victim.name, count[victim.name], time.Since(paused).Round(10*time.Millisecond))
	for time.Since(paused) < 20*time.Second {
		for name, k := range c.supervisorCount() {
			if k != 1 {
				t.Fatalf("%s has %d supervisors while %s is paused", name, k, victim.name)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	victim.proc = proc
	woke := time.Now()
	for time.Since(woke) < 5*time.Second {
		for name, k := range c.supervisorCount() {
			if k != 1 {
				t.Fatalf("%s has %d supervisors after %s woke", name, k, victim.name)
			}
		}
		for _, s := range c.list(victim) {
			if s.Node == victim.name && slices.Contains(keys(sbs), s.Name) {
				t.Fatalf("%s drives %s after waking", victim.name, s.Name)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	after := c.waitAll("p", n, 10*time.Second, func(s status) bool { return s.Node != victim.name })
	for name, s := range sbs {
		if after[name].WorkloadPid != s.WorkloadPid {
			t.Errorf("%s: workload pid %d -> %d", name, s.WorkloadPid, after[name].WorkloadPid)
		}
	}
	m := metricsOf(t, proc.Addrs.Metrics)
	t.Logf("%s after waking: drives none of its former sandboxes; its metrics: %d writes refused by the fencing check, %d self-fences, %d lease losses",
		victim.name, m["stockade_cluster_fenced_writes_total"], m["stockade_cluster_self_fences_total"], m["stockade_cluster_lease_losses_total"])
	if m["stockade_cluster_self_fences_total"] < 1 && m["stockade_cluster_lease_losses_total"] < 1 {
		t.Errorf("a node paused past its lease neither fenced itself nor lost its lease (metrics %v)", m)
	}
}

func keys(m map[string]status) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestClusterEtcdRestart: with etcd killed, a write (stop) fails with a
// clear Unavailable (exit 5) and changes nothing; the sandboxes keep
// running; once etcd is back, the same write works and nothing was lost.
func TestClusterEtcdRestart(t *testing.T) {
	c := newClusterWorld(t, 2)
	sbs := c.createMany("e", 3)
	c.etcd.Kill(t)
	time.Sleep(2 * time.Second) // past the self-fence: the nodes know etcd is gone
	out, errOut, code := c.via(c.nodes[0], "stop", "e0")
	if code != 5 {
		t.Fatalf("stop with etcd down: exit %d, want 5\n%s%s", code, out, errOut)
	}
	t.Logf("stop with etcd down: exit 5: %s", strings.TrimSpace(errOut))
	for name, s := range sbs {
		if err := syscall.Kill(s.WorkloadPid, 0); err != nil {
			t.Errorf("%s: workload %d gone during the etcd outage: %v", name, s.WorkloadPid, err)
		}
	}
	c.etcd.Restart(t)
	after := c.waitAll("e", 3, 30*time.Second, nil)
	for name, s := range sbs {
		if after[name].WorkloadPid != s.WorkloadPid {
			t.Errorf("%s: workload pid %d -> %d across the etcd restart", name, s.WorkloadPid, after[name].WorkloadPid)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, _, code := c.via(c.nodes[0], "stop", "e0")
		return code == 0
	}, "stop works once etcd is back")
}

// TestClusterStartTogether: all nodes started at once, again and again,
// over existing sandboxes: never a sandbox driven by two nodes, never two
// supervisors. STOCKADE_E2E_TOGETHER_ROUNDS (default 5; the issue's
// figure is 20).
func TestClusterStartTogether(t *testing.T) {
	c := newClusterWorld(t, 3)
	const n = 10
	sbs := c.createMany("t", n)
	rounds := envInt("STOCKADE_E2E_TOGETHER_ROUNDS", 5)
	for r := range rounds {
		for _, nd := range c.nodes {
			_ = nd.proc.Cmd.Process.Signal(syscall.SIGKILL)
		}
		for _, nd := range c.nodes {
			_ = nd.proc.Kill()
			nd.proc = nil
		}
		var wg sync.WaitGroup
		for _, nd := range c.nodes {
			wg.Add(1)
			go func() { defer wg.Done(); c.start(nd) }()
		}
		wg.Wait()
		if t.Failed() { // a start failed (in its goroutine): no node to kill next round
			t.FailNow()
		}
		after := c.waitAll("t", n, 30*time.Second, nil)
		c.driven()
		for name, k := range c.supervisorCount() {
			if k != 1 {
				t.Fatalf("round %d: %s has %d supervisors", r+1, name, k)
			}
		}
		for name, s := range sbs {
			if after[name].WorkloadPid != s.WorkloadPid {
				t.Fatalf("round %d: %s workload pid %d -> %d", r+1, name, s.WorkloadPid, after[name].WorkloadPid)
			}
		}
	}
	t.Logf("%d rounds of 3 nodes started at once over %d sandboxes: no sandbox driven twice, one supervisor each", rounds, n)
}

// TestClusterNodeLost: a sandbox lives on the host of the node that made
// it. With no node of that host alive it is Error/NodeLost (its workload
// keeps running), verbs on it exit 5 naming the host, and it is Ready
// again, same workload, when a node of that host returns.
func TestClusterNodeLost(t *testing.T) {
	c := newClusterWorld(t, 1) // n1 on host h-main (this state dir)
	c.nodes[0].proc.Stop(10 * time.Second)
	c.nodes[0].host = "h-main"
	c.start(c.nodes[0])
	other := sharedDir(t, 0)
	if err := os.MkdirAll(filepath.Join(other, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key"} {
		b, err := os.ReadFile(filepath.Join(c.state, "pki", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, "pki", f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	far := &clusterNode{name: "far", state: other, host: "h-far"}
	c.nodes = append(c.nodes, far)
	c.start(far)
	t.Cleanup(func() {
		for _, pid := range testworld.SupervisorsOf(other) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = testworld.RemoveGroupsOf(other, 3*time.Second)
	})
	// Placement spreads creates over both hosts: make sandboxes until one
	// lands on the far host.
	var onFar status
	for i := 0; i < 12 && onFar.Name == ""; i++ {
		name := fmt.Sprintf("l%d", i)
		if out, errOut, code := c.via(c.nodes[0], "create", name, "--policy", c.policy, "--", "/bin/sh", "-c", "exec sleep infinity"); code != 0 {
			t.Fatalf("create %s: exit %d\n%s%s", name, code, out, errOut)
		}
		for _, s := range c.list(c.nodes[0]) {
			if s.Name == name && s.Node == "far" {
				onFar = s
			}
		}
	}
	if onFar.Name == "" {
		t.Fatal("no sandbox was placed on the far host's node in 12 creates")
	}
	if err := far.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	far.proc = nil
	var got status
	testenv.Eventually(t, 15*time.Second, func() bool {
		for _, s := range c.list(c.nodes[0]) {
			if s.Name == onFar.Name {
				got = s
			}
		}
		return got.Phase == "Error" && got.Reason == "NodeLost"
	}, "%s to show Error/NodeLost (last %+v)", onFar.Name, &got)
	if !strings.Contains(got.Message, "h-far") {
		t.Errorf("NodeLost message does not name the host: %q", got.Message)
	}
	if err := syscall.Kill(onFar.WorkloadPid, 0); err != nil {
		t.Errorf("the workload died with its node: %v", err)
	}
	_, errOut, code := c.via(c.nodes[0], "stop", onFar.Name)
	if code != 5 || !strings.Contains(errOut, "NodeLost") || !strings.Contains(errOut, "h-far") {
		t.Errorf("stop of a NodeLost sandbox: exit %d, %q; want 5 naming NodeLost and the host", code, errOut)
	}
	t.Logf("with its host's node gone: %s %s/%s: %s; stop: exit 5: %s", got.Name, got.Phase, got.Reason, got.Message, strings.TrimSpace(errOut))
	c.start(far)
	testenv.Eventually(t, 15*time.Second, func() bool {
		for _, s := range c.list(c.nodes[0]) {
			if s.Name == onFar.Name {
				got = s
			}
		}
		return got.Phase == "Ready" && got.Node == "far"
	}, "%s Ready again on the far node (last %+v)", onFar.Name, &got)
	if got.WorkloadPid != onFar.WorkloadPid {
		t.Errorf("workload pid %d -> %d: restarted instead of adopted", onFar.WorkloadPid, got.WorkloadPid)
	}
}

// metricsOf reads the stockade_cluster_* counters a node serves.
func metricsOf(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "stockade_cluster_") {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = int64(v)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no stockade_cluster_ metrics at %s", addr)
	}
	return out
}

// TestClusterOwnerDiesMidRequest: a request through one node for a
// sandbox another node owns is relayed; when the owner dies before it
// answers, a verb fails at once (exit 5, saying the owner went away and to
// check with get) instead of waiting out the client's 30 s, and a get is
// retried until the sandbox's new owner (or its record) answers.
func TestClusterOwnerDiesMidRequest(t *testing.T) {
	c := newClusterWorld(t, 3, "--chaos")
	sbs := c.createMany("m", 6)
	run := func(owner *clusterNode, verb []string, via []*clusterNode) (string, int, time.Duration) {
		// The owner's API holds its next request 5 s: it dies meanwhile.
		if out, errOut, code := c.via(owner, "fault", "--gateway", "api.request=delay/5s:1"); code != 0 {
			t.Fatalf("arm the owner's API: exit %d %s%s", code, out, errOut)
		}
		addrs := []string{}
		for _, nd := range via {
			addrs = append(addrs, nd.addr)
		}
		cmd := exec.Command(bin, append([]string{"sandbox", "--state-dir", c.state}, verb...)...)
		cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+strings.Join(addrs, ","))
		type res struct {
			out  string
			code int
		}
		done := make(chan res, 1)
		start := time.Now()
		go func() { out, errOut, code := runCmd(t, cmd); done <- res{out + errOut, code} }()
		time.Sleep(1 * time.Second)
		killed := time.Now()
		if err := owner.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		owner.proc = nil
		r := <-done
		_ = start
		return r.out, r.code, time.Since(killed)
	}
	pick := func() (*clusterNode, string, []*clusterNode) {
		for _, s := range sbs {
			if owner := c.node(s.Node); owner != nil && owner.proc != nil {
				var others []*clusterNode
				for _, nd := range c.alive() {
					if nd != owner {
						others = append(others, nd)
					}
				}
				return owner, s.Name, others
			}
		}
		t.Fatal("no sandbox with a live owner")
		return nil, "", nil
	}

	owner, name, others := pick()
	out, code, took := run(owner, []string{"stop", name, "--no-wait"}, others[:1])
	t.Logf("stop %s through %s while its owner %s died: exit %d after %s: %s", name, others[0].name, owner.name, code, took.Round(10*time.Millisecond), strings.TrimSpace(out))
	if code != 5 || !strings.Contains(out, "went away") || took > 3*time.Second {
		t.Errorf("stop across the owner's death: exit %d after %s (%q); want 5 at once, saying the owner went away", code, took, out)
	}
	c.start(owner)
	sbs = c.waitAll("m", 6, 30*time.Second, nil)

	owner, name, others = pick()
	out, code, took = run(owner, []string{"get", name, "-o", "json"}, others)
	t.Logf("get %s through %s while its owner %s died: exit %d after %s", name, others[0].name, owner.name, code, took.Round(10*time.Millisecond))
	if code != 0 || !strings.Contains(out, `"name": "`+name+`"`) {
		t.Errorf("get across the owner's death: exit %d (%q); want the sandbox, from another node", code, out)
	}
	if took > 12*time.Second {
		t.Errorf("get across the owner's death took %s", took)
	}
	c.start(owner)
}

// busiest is the node that drives the most of sbs, and how many each
// node drives.
func (c *clusterWorld) busiest(sbs map[string]status) (*clusterNode, map[string]int) {
	count := map[string]int{}
	for _, s := range sbs {
		count[s.Node]++
	}
	var most *clusterNode
	for _, nd := range c.nodes {
		if most == nil || count[nd.name] > count[most.name] {
			most = nd
		}
	}
	return most, count
}
