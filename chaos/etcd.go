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
	"strings"
	"sync"
	"syscall"
	"time"
)

// etcdWorld is a cluster run's etcd and each node's link to it: node i
// reaches etcd only through proxies[i], a TCP proxy the harness can cut.
type etcdWorld struct {
	etcd    *etcdServer
	proxies []*tcpProxy
	ttl     time.Duration // the nodes' --lease-ttl
}

// newEtcdWorld starts etcd (data in dir/etcd, log dir/etcd.log) and one
// proxy per node.
func newEtcdWorld(ctx context.Context, dir string, nodes int, ttl time.Duration) (*etcdWorld, error) {
	e, err := startEtcd(ctx, dir)
	if err != nil {
		return nil, err
	}
	c := &etcdWorld{etcd: e, ttl: ttl}
	for range nodes {
		p, err := newProxy(strings.TrimPrefix(e.client, "http://"))
		if err != nil {
			c.close()
			return nil, err
		}
		c.proxies = append(c.proxies, p)
	}
	return c, nil
}

func (c *etcdWorld) close() {
	for _, p := range c.proxies {
		p.close()
	}
	c.etcd.stop()
}

// etcdServer is a real etcd (Debian's etcd-server), one member, on free
// ports of 127.0.0.1; it can be killed and restarted on its data dir and
// ports. (internal/etcdtest does the same for tests; this one takes no
// testing.TB: the harness is linked into the stockade binary.)
type etcdServer struct {
	bin, dataDir, logPath string
	client, peer          string // URLs

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startEtcd starts a new etcd and waits until it is healthy.
func startEtcd(ctx context.Context, dir string) (*etcdServer, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("chaos: a cluster run needs etcd (Debian: apt-get install etcd-server): %w", err)
	}
	e := &etcdServer{bin: bin, dataDir: filepath.Join(dir, "etcd"), logPath: filepath.Join(dir, "etcd.log")}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	e.client, e.peer = fmt.Sprintf("http://127.0.0.1:%d", ports[0]), fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := e.start(ctx, "new"); err != nil {
		return nil, err
	}
	return e, nil
}

// freePorts returns n distinct ports of 127.0.0.1 that were free a moment
// ago.
func freePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chaos: free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// start starts etcd ("new" cluster state, or "existing" on its data dir)
// and waits up to 30 s until it is healthy; a start whose port is still
// taken (by another process's outgoing connection) is retried for 10 s.
func (e *etcdServer) start(ctx context.Context, state string) error {
	retryUntil := time.Now().Add(10 * time.Second)
	for {
		err := e.startOnce(ctx, state)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(retryUntil) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: etcd: %w (retrying: %w)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (e *etcdServer) startOnce(ctx context.Context, state string) error {
	lf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: etcd log: %w", err)
	}
	defer lf.Close() // etcd has its own copy
	st, err := lf.Stat()
	if err != nil {
		return fmt.Errorf("chaos: etcd log: %w", err)
	}
	from := st.Size()
	cmd := exec.Command(e.bin,
		"--name", "chaos",
		"--data-dir", e.dataDir,
		"--listen-client-urls", e.client,
		"--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer,
		"--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "chaos="+e.peer,
		"--initial-cluster-state", state,
		"--logger", "zap", "--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start etcd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	e.mu.Lock()
	e.cmd, e.done = cmd, done
	e.mu.Unlock()
	if err := e.waitHealthy(ctx, done); err != nil {
		e.kill()
		tail := e.logSince(from)
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %w", syscall.EADDRINUSE, err)
		}
		return fmt.Errorf("%w; etcd's log %s ends:\n%s", err, e.logPath, lastLines(tail, 20))
	}
	return nil
}

func (e *etcdServer) waitHealthy(ctx context.Context, done chan struct{}) error {
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-done:
			return errors.New("chaos: etcd exited before it was healthy")
		case <-ctx.Done():
			return fmt.Errorf("chaos: etcd: %w", ctx.Err())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.client+"/health", nil)
		if err != nil {
			return fmt.Errorf("chaos: etcd health: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(body.String(), `"health":"true"`) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: etcd at %s not healthy after 30 s", e.client)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *etcdServer) logSince(from int64) string {
	f, err := os.Open(e.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := f.Seek(from, io.SeekStart); err == nil {
		_, _ = b.ReadFrom(f)
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// take forgets the running process and returns it (nil when none runs).
func (e *etcdServer) take() (*exec.Cmd, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cmd, done := e.cmd, e.done
	e.cmd = nil
	return cmd, done
}

// kill SIGKILLs etcd and waits (10 s at most) until it is gone.
func (e *etcdServer) kill() {
	if cmd, done := e.take(); cmd != nil {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
}

// restart starts a killed etcd again on its data dir and ports.
func (e *etcdServer) restart(ctx context.Context) error {
	e.kill()
	return e.start(ctx, "existing")
}

// stop sends SIGTERM, waits up to 10 s, then SIGKILLs.
func (e *etcdServer) stop() {
	cmd, done := e.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// tcpProxy forwards connections from a loopback port to target; cut
// closes every connection and refuses new ones (accepted and closed at
// once) until heal.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: etcd proxy: %w", err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// URL is the proxy's address as an etcd client URL.
func (p *tcpProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.handle(c) }()
	}
}

// track adds c to the open connections unless the link is cut.
func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.conns == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *tcpProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *tcpProxy) handle(c net.Conn) {
	if !p.track(c) {
		_ = c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil || !p.track(up) {
		if up != nil {
			_ = up.Close()
		}
		p.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	p.untrack(c, up) // the other copy ends on the closed connections
	<-done
}

// cutLink closes every connection and refuses new ones until heal; it
// returns how many proxied connections it closed.
func (p *tcpProxy) cutLink() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	n := len(p.conns) / 2 // each is two connections
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
	return n
}

func (p *tcpProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *tcpProxy) close() {
	p.cutLink()
	_ = p.ln.Close()
	p.mu.Lock()
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
