package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testworld"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// world is one gateway (restartable), or in a cluster run a real etcd
// and gateway nodes sharing one state dir, over a state dir, an upstream
// web server on loopback, a hosts file and a policy; clients are the real
// CLI binary (execs) and the client package (verbs).
type world struct {
	bin, dir, state, hosts, policy string
	webPort                        int
	web                            *http.Server
	gwFlags                        []string
	// cl is the cluster's etcd and the nodes' links to it (nil: one
	// gateway on bbolt).
	cl *etcdWorld

	mu  sync.Mutex
	gws []*gw // one gateway, or the cluster's nodes
	rr  int   // rotates the node a request or a CLI call tries first
	// downSince is set while a gateway is known to be down (killed, not
	// yet restarted, or paused): failures then are expected.
	downSince time.Time
	downs     []window
}

// gw is one gateway process: the single gateway, or a cluster node.
type gw struct {
	name string // "gateway", or the node's name (n1, n2, ...)
	// Fixed after the first start: supervisors and clients know them.
	addr, relay string
	metrics     string
	proc        *testworld.Process
	cl          *client.Client
	// down: killed (not yet restarted) or paused; requests and CLI calls
	// do not go to it.
	down bool
}

type window struct{ from, to time.Time }

func newWorld(bin, dir string) (*world, error) {
	w := &world{bin: bin, dir: dir, state: filepath.Join(dir, "state"), gws: []*gw{{name: "gateway"}}}
	// The state dir is readable by the gateway's user (root or not).
	if err := os.MkdirAll(w.state, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: upstream listener: %w", err)
	}
	w.webPort = ln.Addr().(*net.TCPAddr).Port
	w.web = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "upstream says hi to %s", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = w.web.Serve(ln) }()
	w.hosts = filepath.Join(dir, "hosts")
	w.policy = filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(w.hosts, []byte("127.0.0.1 api.test\n"), 0o644); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	if err := os.WriteFile(w.policy, []byte(policyText(w.webPort, 1)), 0o644); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return w, nil
}

// policyText is the sandboxes' policy; rev changes a comment-free field
// (the policy's name) so a reload is a real new version.
func policyText(port, rev int) string {
	return fmt.Sprintf(`version: 1
filesystem_policy:
  read_only: [/usr, /lib, /lib64, /bin, /sbin, /etc]
  read_write: [/sandbox, /tmp, /dev/null]
landlock:
  compatibility: best_effort
network_policies:
  api:
    name: api-rev%d
    endpoints: [{ host: api.test, port: %d }]
    binaries: [{ path: /usr/bin/curl }]
`, rev, port)
}

// startGateway starts (or restarts) the single gateway, or every node of
// a cluster at once.
func (w *world) startGateway(ctx context.Context) error {
	errs := make([]error, len(w.gws))
	var wg sync.WaitGroup
	for i := range w.gws {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.startNode(ctx, i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startNode starts (or restarts) gateway i and waits for its ready file;
// its output is appended to NAME.log in the run dir.
func (w *world) startNode(ctx context.Context, i int) error {
	w.mu.Lock()
	g := w.gws[i]
	listen, relay := "127.0.0.1:0", "127.0.0.1:0"
	if g.addr != "" {
		listen, relay = g.addr, g.relay // supervisors know these
	}
	w.mu.Unlock()
	args := []string{"gateway", "run", "--state-dir", w.state, "--listen", listen, "--relay-listen", relay,
		"--hosts", w.hosts, "--allow-loopback-upstream", "--log-format", "json", "--metrics", "127.0.0.1:0", "--chaos"}
	if w.cl != nil {
		// Plain http, by name: the harness's own etcd in its temporary
		// dir, reached through its fault proxies (which cut and delay
		// the TCP streams); e2e's cluster tests run etcd with mutual TLS.
		args = append(args, "--etcd", w.cl.proxies[i].URL(), "--etcd-insecure", "--node", g.name, "--lease-ttl", w.cl.ttl.String())
	}
	args = append(args, w.gwFlags...)
	// A restart keeps its ports; another process's outgoing connection
	// may hold one for a moment: RetryInUse.
	p, err := testworld.StartProcess(ctx, testworld.Spec{Bin: w.bin, Args: args, Dir: w.dir, Name: g.name,
		Timeout: 30 * time.Second, RetryInUse: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	// One client per gateway for the whole run: a gateway keeps its
	// address across restarts, and every protoactor remote started in one
	// process races on grpc's global logger (under -race).
	w.mu.Lock()
	cl := g.cl
	w.mu.Unlock()
	if cl == nil {
		cfg, err := trust.ReadClientConfig(contract.StateDir(w.state).ClientConfig())
		if err == nil {
			cl, err = client.Dial(p.Addrs.API, cfg, zerolog.Nop())
		}
		if err != nil {
			_ = p.Kill()
			return fmt.Errorf("chaos: dial %s: %w", g.name, err)
		}
	}
	w.mu.Lock()
	g.addr, g.relay, g.metrics, g.proc, g.cl, g.down = p.Addrs.API, p.Addrs.Relay, p.Addrs.Metrics, p, cl, false
	w.upLocked()
	w.mu.Unlock()
	return nil
}

// upLocked closes the down window once no gateway is down (w.mu held).
func (w *world) upLocked() {
	for _, g := range w.gws {
		if g.down {
			return
		}
	}
	if !w.downSince.IsZero() {
		w.downs = append(w.downs, window{w.downSince, time.Now()})
		w.downSince = time.Time{}
	}
}

// markDown marks gateway i down (w.mu held) and returns its process.
func (w *world) markDown(i int) *testworld.Process {
	g := w.gws[i]
	g.down = true
	if w.downSince.IsZero() {
		w.downSince = time.Now()
	}
	return g.proc
}

// killGateway SIGKILLs the single gateway.
func (w *world) killGateway() { w.killNode(0) }

// killNode SIGKILLs gateway i and waits for it to be gone.
func (w *world) killNode(i int) {
	w.mu.Lock()
	p := w.markDown(i)
	w.mu.Unlock()
	if p != nil {
		_ = p.Kill()
	}
}

// pauseNode SIGSTOPs gateway i; resumeNode continues it.
func (w *world) pauseNode(i int) error {
	w.mu.Lock()
	p := w.markDown(i)
	w.mu.Unlock()
	if p == nil {
		return fmt.Errorf("chaos: %s is not running", w.gws[i].name)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("chaos: SIGSTOP %s: %w", w.gws[i].name, err)
	}
	return nil
}

func (w *world) resumeNode(i int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gws[i]
	if err := g.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("chaos: SIGCONT %s: %w", g.name, err)
	}
	g.down = false
	w.upLocked()
	return nil
}

// stopGateway stops every gateway gracefully (SIGTERM, 15 s, SIGKILL).
func (w *world) stopGateway() {
	w.mu.Lock()
	var ps []*testworld.Process
	for i := range w.gws {
		if p := w.markDown(i); p != nil {
			_ = p.Cmd.Process.Signal(syscall.SIGCONT) // a paused one, should a run end during a pause
			ps = append(ps, p)
		}
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Stop(15 * time.Second) }()
	}
	wg.Wait()
}

// downDuring reports whether a gateway was down at any time in [from, to].
func (w *world) downDuring(from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.downSince.IsZero() && w.downSince.Before(to) {
		return true
	}
	for _, d := range w.downs {
		if d.from.Before(to) && d.to.After(from) {
			return true
		}
	}
	return false
}

// live returns the indexes of the gateways not down, rotated so that
// successive calls start at another one.
func (w *world) live() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rr++
	var out []int
	for k := range w.gws {
		i := (w.rr + k) % len(w.gws)
		if !w.gws[i].down {
			out = append(out, i)
		}
	}
	return out
}

// gatewayArg is the CLI's --gateway: the single gateway's address (even
// while it is down), or every live node's, rotated.
func (w *world) gatewayArg() string {
	if len(w.gws) == 1 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.gws[0].addr
	}
	var addrs []string
	for _, i := range w.live() {
		w.mu.Lock()
		addrs = append(addrs, w.gws[i].addr)
		w.mu.Unlock()
	}
	return strings.Join(addrs, ",")
}

// request sends one API request: to the single gateway, or to the live
// nodes in turn until one answers.
func (w *world) request(ctx context.Context, msg proto.Message) (*messages.Reply, error) {
	if len(w.gws) == 1 {
		return w.requestTo(ctx, 0, msg)
	}
	err := errors.New("no live gateway node")
	for _, i := range w.live() {
		var r *messages.Reply
		if r, err = w.requestTo(ctx, i, msg); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// requestTo sends one API request to gateway i.
func (w *world) requestTo(ctx context.Context, i int, msg proto.Message) (*messages.Reply, error) {
	w.mu.Lock()
	cl := w.gws[i].cl
	w.mu.Unlock()
	if cl == nil {
		return nil, errors.New("gateway down")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return cl.Request(ctx, msg)
}

func (w *world) get(ctx context.Context, name string) (*messages.SandboxStatus, error) {
	r, err := w.request(ctx, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_GET})
	if err != nil {
		return nil, err
	}
	if r.Status != messages.Status_STATUS_OK {
		return nil, fmt.Errorf("get %s: %s: %s", name, r.Status, r.Message)
	}
	return r.Sandbox, nil
}

func (w *world) list(ctx context.Context) ([]*messages.SandboxStatus, error) {
	r, err := w.request(ctx, &messages.ListRequest{})
	if err != nil {
		return nil, err
	}
	if r.Status != messages.Status_STATUS_OK {
		return nil, fmt.Errorf("list: %s: %s", r.Status, r.Message)
	}
	return r.Sandboxes, nil
}

// fault arms a rule in a sandbox's supervisor ("" name: the gateway) and
// returns how often its point fired before.
func (w *world) fault(ctx context.Context, name, rule string) (int, error) {
	r, err := w.request(ctx, &messages.FaultRequest{Name: name, Rule: rule})
	if err != nil {
		return 0, err
	}
	if r.Status != messages.Status_STATUS_OK {
		return 0, fmt.Errorf("fault %s %s: %s: %s", name, rule, r.Status, r.Message)
	}
	return int(r.Fired), nil
}

// gatewayFault arms a rule in gateway node (-1: any, or the single
// gateway) and returns how often its point fired before.
func (w *world) gatewayFault(ctx context.Context, node int, rule string) (int, error) {
	if node < 0 {
		return w.fault(ctx, "", rule)
	}
	r, err := w.requestTo(ctx, node, &messages.FaultRequest{Rule: rule})
	if err != nil {
		return 0, err
	}
	if r.Status != messages.Status_STATUS_OK {
		return 0, fmt.Errorf("fault %s on %s: %s: %s", rule, w.gws[node].name, r.Status, r.Message)
	}
	return int(r.Fired), nil
}

// cli runs the stockade CLI (a sandbox verb) and returns its result.
type cliResult struct {
	out, err string
	code     int
	start    time.Time
	took     time.Duration
	killed   bool // the harness had to kill it (hung)
}

func (w *world) cli(ctx context.Context, timeout time.Duration, args ...string) cliResult {
	addr := w.gatewayArg()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, append([]string{"sandbox", "--state-dir", w.state, "--gateway", addr}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	res := cliResult{start: time.Now()}
	err := cmd.Run()
	res.took = time.Since(res.start)
	res.out, res.err = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		res.code = ee.ExitCode()
	default:
		res.code, res.killed = -1, ctx.Err() != nil
		if res.err == "" {
			res.err = err.Error()
		}
	}
	return res
}

// exec runs a shell script in a sandbox with the real CLI.
func (w *world) exec(ctx context.Context, name, script string) cliResult {
	return w.cli(ctx, 90*time.Second, "exec", name, "--timeout", "60s", "--", "/bin/sh", "-c", script)
}

// goroutines reads go_goroutines from the gateway's metrics (in a
// cluster, the sum over its nodes).
func (w *world) goroutines(ctx context.Context) (int, error) {
	total := 0
	for i := range w.gws {
		w.mu.Lock()
		addr, name := w.gws[i].metrics, w.gws[i].name
		w.mu.Unlock()
		n, err := goroutinesAt(ctx, addr)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		total += n
	}
	return total, nil
}

func goroutinesAt(ctx context.Context, addr string) (int, error) {
	if addr == "" {
		return 0, errors.New("gateway metrics address unknown")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("gateway metrics: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n), err
		}
	}
	return 0, errors.New("gateway metrics: no go_goroutines")
}

func (w *world) close() {
	w.stopGateway()
	w.mu.Lock()
	var cls []*client.Client
	for _, g := range w.gws {
		if g.cl != nil {
			cls = append(cls, g.cl)
			g.cl = nil
		}
	}
	w.mu.Unlock()
	for _, cl := range cls {
		cl.Close()
	}
	_ = w.web.Close()
	if w.cl != nil {
		w.cl.close()
	}
}

// goroutineDump fetches every node's grouped goroutine stacks (the
// gateway's /debug/goroutines, served with --chaos), writes them to
// dir/goroutines-NODE.txt and returns the largest groups as one line
// each: "COUNT first-frame-function".
func (w *world) goroutineDump(ctx context.Context, dir string) ([]string, error) {
	var top []string
	for i := range w.gws {
		w.mu.Lock()
		addr, name := w.gws[i].metrics, w.gws[i].name
		w.mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/goroutines", nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s goroutine dump: %w", name, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s goroutine dump: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "goroutines-"+name+".txt"), b, 0o644); err != nil {
			return nil, fmt.Errorf("%s goroutine dump: %w", name, err)
		}
		for _, g := range largestGroups(string(b), 5) {
			top = append(top, name+": "+g)
		}
	}
	return top, nil
}

// largestGroups reads a goroutine profile at debug=1 (groups of "N @
// addresses" then "#\taddr\tfunction+off\tfile:line" frames) and returns
// the n largest groups as "N function-of-the-first-frame".
func largestGroups(profile string, n int) []string {
	type group struct {
		count int
		fn    string
	}
	var groups []group
	for _, line := range strings.Split(profile, "\n") {
		if head, _, ok := strings.Cut(line, " @ "); ok {
			if count, err := strconv.Atoi(head); err == nil {
				groups = append(groups, group{count, "?"})
			}
			continue
		}
		// The group's first frame: "#\t0xADDR\tfunction+0xOFF\tfile:line".
		if fields := strings.Fields(line); len(groups) > 0 && groups[len(groups)-1].fn == "?" && len(fields) >= 3 && fields[0] == "#" {
			groups[len(groups)-1].fn, _, _ = strings.Cut(fields[2], "+0x")
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].count > groups[j].count })
	var out []string
	for i := 0; i < len(groups) && i < n; i++ {
		out = append(out, fmt.Sprintf("%d %s", groups[i].count, groups[i].fn))
	}
	return out
}
