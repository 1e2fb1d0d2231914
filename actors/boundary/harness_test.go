package boundary_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/boundary"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/policy"
	"github.com/stockade-dev/stockade/policy/reason"
)

// recorder is an audit.Sink that keeps events for assertions.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Record(e audit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(class audit.Class, code reason.Code) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.ClassUID == class && e.Reason == code {
			n++
		}
	}
	return n
}

// env is a running boundary on 127.0.0.1 with a TCP echo upstream
// ("up.test") and an HTTP upstream ("web.test"), both on loopback.
type env struct {
	b        *boundary.Boundary
	sys      *actor.ActorSystem
	engine   *policy.Engine
	faults   *fault.Set
	audit    *recorder
	proxy    string // proxy address
	dns      string // DNS address (UDP and TCP)
	echoPort int
	// echoConns counts the connections the echo upstream accepted.
	echoConns *atomic.Int64
	webPort   int
	holdPort  int    // "hold.test": reads until EOF, then holds the connection open
	release   func() // closes the connections hold.test holds
	dir       string
}

type envOpts struct {
	identityNone bool
	// wrap, when set, wraps the netlink resolver the boundary gets.
	wrap func(identity.Resolver) identity.Resolver
	// idOpts are more options of the netlink resolver.
	idOpts        []identity.Option
	headerTimeout time.Duration
	auditFile     string
	maxConns      int
	idleActors    int           // Config.IdleConnActors
	sweep         time.Duration // Config.KeepAliveSweep
}

func startEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{faults: fault.NewSet(), audit: &recorder{}, dir: t.TempDir()}
	e.echoPort, e.echoConns = startEcho(t)
	e.webPort = startWeb(t)
	e.holdPort, e.release = startHold(t)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	pol := fmt.Sprintf(`version: 1
network_policies:
  tests:
    name: test-upstreams
    endpoints:
      - { host: up.test, port: %[1]d }
      - { host: web.test, port: %[2]d }
      - { host: "*.wild.test", port: %[2]d }
      - { host: hold.test, port: %[4]d }
    binaries:
      - { path: %[3]q }
      - { path: /usr/bin/curl }
  curl_only:
    name: curl-only
    endpoints:
      - { host: curlonly.test, port: %[2]d }
    binaries:
      - { path: /usr/bin/curl }
`, e.echoPort, e.webPort, exe, e.holdPort)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	e.engine = policy.NewEngine(policy.WithFaults(e.faults), policy.WithLogger(log))
	if _, err := e.engine.Load("test-policy.yaml", []byte(pol)); err != nil {
		t.Fatalf("load policy: %v", err)
	}
	hostsFile := filepath.Join(e.dir, "hosts")
	hosts := "127.0.0.1 up.test web.test curlonly.test denied.test a.wild.test hold.test\n169.254.169.254 metadata.test\n"
	if err := os.WriteFile(hostsFile, []byte(hosts), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := dnsproxy.LoadHosts(hostsFile)
	if err != nil {
		t.Fatal(err)
	}

	var res identity.Resolver = identity.None{}
	if !o.identityNone {
		nl, err := identity.NewNetlink(append([]identity.Option{identity.WithInjector(e.faults)}, o.idOpts...)...)
		if err != nil {
			t.Fatalf("netlink identity: %v", err)
		}
		t.Cleanup(func() { _ = nl.Close() })
		res = nl
		if o.wrap != nil {
			res = o.wrap(nl)
		}
	}
	var sink audit.Sink = e.audit
	if o.auditFile != "" {
		af, err := audit.OpenFile(o.auditFile)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = af.Close() })
		sink = audit.Multi{e.audit, af}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, tl, err := boundary.ListenDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.proxy, e.dns = ln.Addr().String(), pc.LocalAddr().String()

	e.sys = actor.NewActorSystem(logx.ActorSystemOption(log))
	e.b, err = boundary.Start(e.sys, boundary.Config{
		Proxy: ln, DNSPacket: pc, DNSStream: tl,
		Decider: boundary.PolicyDecider(e.engine), Identity: res,
		Resolver: proxy.UpstreamResolver{Up: h}, DNSUpstream: h,
		AllowLoopback: true, Audit: sink, Injector: e.faults, Log: log,
		Counters: supervise.NewCounters(), HeaderTimeout: o.headerTimeout, MaxConns: o.maxConns,
		IdleConnActors: o.idleActors, KeepAliveSweep: o.sweep,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.b.Stop(); err != nil {
			t.Errorf("stop boundary: %v", err)
		}
		e.sys.Shutdown()
		_ = ln.Close()
		_ = pc.Close()
		_ = tl.Close()
	})
	return e
}

// startEcho starts a TCP echo server that echoes until EOF, then closes;
// it counts the connections it accepted.
func startEcho(t testing.TB) (int, *atomic.Int64) {
	var n atomic.Int64
	return serveEach(t, func(c net.Conn) {
		n.Add(1)
		_, _ = io.Copy(c, c)
	}), &n
}

// startHold starts a TCP server that reads each connection until EOF and
// then holds it open until release is called or the test ends: a tunnel
// to it outlives its client's half-close.
func startHold(t testing.TB) (port int, release func()) {
	done := make(chan struct{})
	release = sync.OnceFunc(func() { close(done) })
	t.Cleanup(release)
	return serveEach(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
		<-done
	}), release
}

// serveEach listens on a loopback port until the test ends and runs
// handle on each connection in its own goroutine, closing it after.
func serveEach(t testing.TB, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func startWeb(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// connect opens a CONNECT tunnel and returns the status line, the
// response body (for a non-200) and the conn (for a 200).
func (e *env) connect(t testing.TB, host string, port int) (int, string, net.Conn) {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	return connectOn(t, c, host, port)
}

// connectOn is connect on a connection to the proxy made before.
func connectOn(t testing.TB, c net.Conn, host string, port int) (int, string, net.Conn) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host, port, host, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		_ = c.Close()
		t.Fatalf("read CONNECT response: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		_ = c.Close()
		return resp.StatusCode, string(body), nil
	}
	if br.Buffered() > 0 {
		t.Fatalf("proxy sent %d bytes after its 200", br.Buffered())
	}
	_ = c.SetDeadline(time.Time{})
	return resp.StatusCode, "", c
}

func restartsOf(b *boundary.Boundary, kind string) int64 {
	return b.Counters().Get(kind, actor.RestartDirective)
}

func stopsOf(b *boundary.Boundary, kind string) int64 {
	return b.Counters().Get(kind, actor.StopDirective)
}
