package loadgen

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
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
