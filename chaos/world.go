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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testworld"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// world is one gateway (restartable) over a state dir, an upstream web
// server on loopback, a hosts file and a policy; clients are the real CLI
// binary (execs) and the client package (verbs).
type world struct {
	bin, dir, state, hosts, policy string
	webPort                        int
	web                            *http.Server
	gwFlags                        []string

	mu      sync.Mutex
	addr    string // API address, fixed after the first start
	relay   string
	metrics string
	gw      *testworld.Process
	cl      *client.Client
	// down is set while the gateway is known to be down (killed, not yet
	// restarted): failures then are expected.
	downSince time.Time
	downs     []window
}

type window struct{ from, to time.Time }

func newWorld(bin, dir string) (*world, error) {
	w := &world{bin: bin, dir: dir, state: filepath.Join(dir, "state")}
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

// startGateway starts (or restarts) the gateway and waits for its ready
// file; its output is appended to gateway.log in the run dir.
func (w *world) startGateway(ctx context.Context) error {
	w.mu.Lock()
	listen, relay := "127.0.0.1:0", "127.0.0.1:0"
	if w.addr != "" {
		listen, relay = w.addr, w.relay // supervisors know these
	}
	w.mu.Unlock()
	args := append([]string{"gateway", "run", "--state-dir", w.state, "--listen", listen, "--relay-listen", relay,
		"--hosts", w.hosts, "--allow-loopback-upstream", "--log-format", "json", "--metrics", "127.0.0.1:0", "--chaos"},
		w.gwFlags...)
	// A restart keeps its ports; another process's outgoing connection
	// may hold one for a moment: RetryInUse.
	p, err := testworld.StartProcess(ctx, testworld.Spec{Bin: w.bin, Args: args, Dir: w.dir, Name: "gateway",
		Timeout: 30 * time.Second, RetryInUse: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	// One client for the whole run: the gateway keeps its address across
	// restarts, and starting a second protoactor remote in one process
	// races on grpc's global logger.
	w.mu.Lock()
	cl := w.cl
	w.mu.Unlock()
	if cl == nil {
		cfg, err := trust.ReadClientConfig(contract.StateDir(w.state).ClientConfig())
		if err == nil {
			cl, err = client.Dial(p.Addrs.API, cfg, zerolog.Nop())
		}
		if err != nil {
			_ = p.Kill()
			return fmt.Errorf("chaos: dial gateway: %w", err)
		}
	}
	w.mu.Lock()
	w.addr, w.relay, w.metrics, w.gw, w.cl = p.Addrs.API, p.Addrs.Relay, p.Addrs.Metrics, p, cl
	if !w.downSince.IsZero() {
		w.downs = append(w.downs, window{w.downSince, time.Now()})
		w.downSince = time.Time{}
	}
	w.mu.Unlock()
	return nil
}

// killGateway SIGKILLs the gateway and waits for it to be gone.
func (w *world) killGateway() {
	w.mu.Lock()
	p := w.gw
	w.downSince = time.Now()
	w.mu.Unlock()
	_ = p.Kill()
}

// stopGateway stops the gateway gracefully (SIGTERM, 15 s, SIGKILL).
func (w *world) stopGateway() {
	w.mu.Lock()
	p := w.gw
	w.downSince = time.Now()
	w.mu.Unlock()
	if p != nil {
		_ = p.Stop(15 * time.Second)
	}
}

// downDuring reports whether the gateway was down at any time in [from, to].
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

// request sends one API request on the current client.
func (w *world) request(ctx context.Context, msg proto.Message) (*messages.Reply, error) {
	w.mu.Lock()
	cl := w.cl
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

// cli runs the stockade CLI (a sandbox verb) and returns its result.
type cliResult struct {
	out, err string
	code     int
	start    time.Time
	took     time.Duration
	killed   bool // the harness had to kill it (hung)
}

func (w *world) cli(ctx context.Context, timeout time.Duration, args ...string) cliResult {
	w.mu.Lock()
	addr := w.addr
	w.mu.Unlock()
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

// goroutines reads go_goroutines from the gateway's metrics.
func (w *world) goroutines(ctx context.Context) (int, error) {
	w.mu.Lock()
	addr := w.metrics
	w.mu.Unlock()
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
	cl := w.cl
	w.cl = nil
	w.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	_ = w.web.Close()
}
