package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/internal/etcdproc"
)

// etcdWorld is a cluster run's etcd and each node's link to it: node i
// reaches etcd only through proxies[i], a TCP proxy the harness can cut.
type etcdWorld struct {
	etcd    *etcdproc.Server
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
		p, err := newProxy(strings.TrimPrefix(e.ClientURL(), "http://"))
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
	_ = c.etcd.Stop()
}

// startEtcd starts a real etcd (Debian's etcd-server), one member, on free
// ports of 127.0.0.1 and waits until it is healthy; it can be killed and
// restarted on its data dir and ports. A restart whose port is still taken
// (by another process's outgoing connection) is retried for 10 s.
func startEtcd(ctx context.Context, dir string) (*etcdproc.Server, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("chaos: a cluster run needs etcd (Debian: apt-get install etcd-server): %w", err)
	}
	e, err := etcdproc.Start(ctx, etcdproc.Config{
		Bin:        bin,
		Name:       "chaos",
		DataDir:    filepath.Join(dir, "etcd"),
		LogPath:    filepath.Join(dir, "etcd.log"),
		RetryInUse: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: the run's etcd: %w", err)
	}
	return e, nil
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
