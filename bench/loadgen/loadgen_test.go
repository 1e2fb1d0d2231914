package loadgen

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startUpstream(t *testing.T) *Upstream {
	t.Helper()
	u, err := ListenUpstream("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("close upstream: %v", err)
		}
	})
	return u
}

func TestTunnelsDirect(t *testing.T) {
	u := startUpstream(t)
	res, err := Tunnels(context.Background(), TunnelConfig{
		Target:      Target{Addr: u.EchoAddr()},
		Concurrency: 4,
		Duration:    time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Tunnels == 0 {
		t.Fatalf("want tunnels and no errors, got %+v", res)
	}
	if res.P50Ns <= 0 || res.P99Ns < res.P50Ns || res.Mode != "direct" {
		t.Fatalf("bad latency summary %+v", res)
	}
	if res.ElapsedNs < time.Second.Nanoseconds() || res.ElapsedNs > (3*time.Second).Nanoseconds() {
		t.Fatalf("elapsed %v outside [1s, 3s]", time.Duration(res.ElapsedNs))
	}
	// The process's own CPU over the run (the upstream's too, here): some,
	// and no more than every CPU for the whole run.
	if res.CPUNs <= 0 || res.CPUNs > res.ElapsedNs*int64(runtime.NumCPU()) {
		t.Fatalf("load CPU %v over %v on %d CPUs", time.Duration(res.CPUNs), time.Duration(res.ElapsedNs), runtime.NumCPU())
	}
}

// connectProxy is a minimal CONNECT proxy for the test: it tunnels to
// allow and answers 403 for anything else.
func connectProxy(t *testing.T, allow string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serveConnect(c, allow) })
		}
	})
	return l.Addr().String()
}

func serveConnect(c net.Conn, allow string) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect || req.Host != allow {
		_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := net.Dial("tcp", allow)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer func() { _ = up.Close() }()
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { _, _ = io.Copy(up, br); _ = up.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(c, up)
}

func TestTunnelsThroughProxy(t *testing.T) {
	u := startUpstream(t)
	proxy := connectProxy(t, u.EchoAddr())
	ok, err := Tunnels(context.Background(), TunnelConfig{
		Target:      Target{Proxy: proxy, Addr: u.EchoAddr()},
		Concurrency: 2,
		Duration:    300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok.Errors != 0 || ok.Tunnels == 0 || ok.Mode != "proxy" {
		t.Fatalf("allowed target: want tunnels and no errors, got %+v", ok)
	}
	denied, err := Tunnels(context.Background(), TunnelConfig{
		Target:      Target{Proxy: proxy, Addr: "denied.test:443"},
		Concurrency: 1,
		Duration:    200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if denied.Tunnels != 0 || denied.Errors == 0 || denied.ErrorKinds["status-403"] != denied.Errors {
		t.Fatalf("denied target: want only status-403 errors, got %+v", denied)
	}
}

func TestBulkDirect(t *testing.T) {
	u := startUpstream(t)
	res, err := Bulk(context.Background(), BulkConfig{Target: Target{Addr: u.SinkAddr()}, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes == 0 || res.Error != "" || res.MBps <= 0 {
		t.Fatalf("want bytes and no error, got %+v", res)
	}
}

func TestPercentile(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want int64
	}{{50, 5}, {99, 10}, {1, 1}, {100, 10}} {
		if got := Percentile(v, c.p); got != c.want {
			t.Errorf("p%v = %d, want %d", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty input must give 0")
	}
}

// openConns is how many connections the upstream holds right now.
func (u *Upstream) openConns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.conns)
}

// TestHold: every tunnel is open (the upstream holds them all) when held
// is called, each still echoes at the end, and all are closed on return.
func TestHold(t *testing.T) {
	u := startUpstream(t)
	for _, c := range []struct {
		name   string
		target Target
	}{
		{"direct", Target{Addr: u.EchoAddr()}},
		{"proxy", Target{Proxy: connectProxy(t, u.EchoAddr()), Addr: u.EchoAddr()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 50
			var atHeld HoldResult
			upstreamOpen := -1
			res, err := Hold(context.Background(), HoldConfig{Target: c.target, N: n, Concurrency: 8, Hold: 200 * time.Millisecond},
				func(r HoldResult) { atHeld, upstreamOpen = r, u.openConns() })
			if err != nil {
				t.Fatal(err)
			}
			if atHeld.Phase != "held" || atHeld.Established != n || atHeld.Errors != 0 || atHeld.Mode != c.name {
				t.Fatalf("held report: %+v", atHeld)
			}
			if upstreamOpen != n {
				t.Fatalf("upstream held %d connections while %d tunnels were reported open", upstreamOpen, n)
			}
			if res.Phase != "done" || res.Established != n || res.Alive != n || res.HeldNs < (200*time.Millisecond).Nanoseconds() {
				t.Fatalf("final report: %+v", res)
			}
			deadline := time.Now().Add(5 * time.Second)
			for u.openConns() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("upstream still holds %d connections after Hold returned", u.openConns())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestHoldDenied: a refused CONNECT counts as an error, not a tunnel.
func TestHoldDenied(t *testing.T) {
	u := startUpstream(t)
	res, err := Hold(context.Background(), HoldConfig{
		Target: Target{Proxy: connectProxy(t, u.EchoAddr()), Addr: "denied.test:443"}, N: 5, Hold: time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Established != 0 || res.Errors != 5 || res.ErrorKinds["status-403"] != 5 || res.FirstError == "" {
		t.Fatalf("want 5 status-403 errors, got %+v", res)
	}
	if _, err := Hold(context.Background(), HoldConfig{N: 0, Hold: time.Second}, nil); err == nil {
		t.Fatal("n 0 must be refused")
	}
}
