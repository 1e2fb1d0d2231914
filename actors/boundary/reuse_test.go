package boundary_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// TestConnActorServesOneConnectionAtATime: a conn actor whose connection
// has ended serves the next one (one actor for a run of sequential
// tunnels), carries nothing of the earlier connection into the next (a
// denial after allowed tunnels is audited with its own destination and
// verdict), and one that failed is stopped and never handed another
// connection: the next connection gets a new actor and is served.
func TestConnActorServesOneConnectionAtATime(t *testing.T) {
	e := startEnv(t, envOpts{})
	st := e.b.Stats()
	idleAgain := func(what string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool { return st.IdleConns.Load() == 1 },
			"the conn actor back in the idle stack after %s (idle %d)", what, st.IdleConns.Load())
	}

	const tunnels = 20
	for i := range tunnels {
		code, body, c := e.connect(t, "up.test", e.echoPort)
		if code != 200 {
			t.Fatalf("tunnel %d: %d %s", i, code, body)
		}
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("tunnel %d echo: %q %v", i, buf, err)
		}
		_ = c.Close()
		idleAgain("a tunnel")
	}
	if n := st.ConnActors.Load(); n != 1 {
		t.Fatalf("%d sequential tunnels spawned %d conn actors, want 1", tunnels, n)
	}

	// A plain HTTP request (relayed on a goroutine the actor waits for),
	// then a tunnel: the same actor serves both.
	hc, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = hc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(hc, "GET http://web.test:%d/plain HTTP/1.1\r\nHost: web.test:%d\r\n\r\n", e.webPort, e.webPort)
	resp, err := http.ReadResponse(bufio.NewReader(hc), nil)
	if err != nil {
		t.Fatalf("plain HTTP through the proxy: %v", err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = hc.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(got), "hello web.test") {
		t.Fatalf("plain HTTP through the proxy: %d %q", resp.StatusCode, got)
	}
	idleAgain("a plain HTTP request")
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("tunnel after a plain HTTP request: %d %s", code, body)
	}
	_ = c.Close()
	idleAgain("the tunnel after it")

	code, body, _ = e.connect(t, "denied.test", e.echoPort)
	if code != 403 || !strings.Contains(body, string(reason.EndpointNotAllowed)) {
		t.Fatalf("denied.test after %d tunnels: %d %s", tunnels, code, body)
	}
	idleAgain("a denial")
	e.audit.mu.Lock()
	last := e.audit.events[len(e.audit.events)-1]
	e.audit.mu.Unlock()
	if last.ActionID != audit.ActionDenied || last.Reason != reason.EndpointNotAllowed || last.Dst == nil || last.Dst.Hostname != "denied.test" {
		t.Fatalf("the denial's audit record carries %+v (dst %+v), want its own denied destination", last, last.Dst)
	}
	if n := st.ConnActors.Load(); n != 1 {
		t.Fatalf("conn actors spawned: %d, want still 1", n)
	}

	// A failure: the actor is stopped with its connection, not reused.
	e.faults.Arm(fault.IdentityLookup, fault.Rule{Kind: fault.KindPanic, Count: 1})
	code, body, _ = e.connect(t, "up.test", e.echoPort)
	if code != 403 || !strings.Contains(body, string(reason.IdentityUnavailable)) {
		t.Fatalf("connection whose actor panics: %d %s, want 403 identity_unavailable", code, body)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return stopsOf(e.b, "conn") == 1 }, "the failed conn actor stopped")
	if n := st.IdleConns.Load(); n != 0 {
		t.Fatalf("idle conn actors after the failure: %d, want 0 (the failed one must not come back)", n)
	}
	code, body, c = e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("next connection after the failure: %d %s", code, body)
	}
	_ = c.Close()
	idleAgain("the connection after the failure")
	if n := st.ConnActors.Load(); n != 2 {
		t.Fatalf("conn actors spawned after the failure: %d, want 2", n)
	}
	if n := e.audit.count(audit.ClassNetwork, reason.None); n != tunnels+3 {
		t.Fatalf("allowed connections audited: %d, want %d", n, tunnels+3)
	}
}

// connActorsAlive counts the conn actors still registered: conn/1 to
// conn/N, N the number spawned.
func connActorsAlive(e *env) int {
	n := 0
	for i := int64(1); i <= e.b.Stats().ConnActors.Load(); i++ {
		if _, ok := e.sys.ProcessRegistry.GetLocal(e.b.PID().Id + "/proxy/conn/" + strconv.FormatInt(i, 10)); ok {
			n++
		}
	}
	return n
}

// TestIdleConnActorsBounded: after a burst, at most IdleConnActors conn
// actors wait; the others stopped.
func TestIdleConnActorsBounded(t *testing.T) {
	e := startEnv(t, envOpts{idleActors: 3})
	const burst = 10
	conns := make([]net.Conn, 0, burst)
	for range burst {
		code, body, c := e.connect(t, "hold.test", e.holdPort)
		if code != 200 {
			t.Fatalf("CONNECT hold.test: %d %s", code, body)
		}
		conns = append(conns, c)
	}
	if n := e.b.Stats().ConnActors.Load(); n != burst {
		t.Fatalf("%d open tunnels have %d conn actors, want one each", burst, n)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	e.release()
	testenv.Eventually(t, 5*time.Second, func() bool { return connActorsAlive(e) == 3 && e.b.OpenConns() == 0 },
		"3 conn actors left (have %d), no connection open (have %d)", connActorsAlive(e), e.b.OpenConns())
	if n := e.b.Stats().IdleConns.Load(); n != 3 {
		t.Fatalf("idle conn actors: %d, want 3", n)
	}
}

// TestProxyRestartsLeaveNothingOpen: the proxy actor restarting (an
// injected listener fault) while connections are handed to its conn
// actors leaves no connection counted open and no idle actor counted that
// is gone, and the proxy serves after.
func TestProxyRestartsLeaveNothingOpen(t *testing.T) {
	e := startEnv(t, envOpts{})
	client := func(wg *sync.WaitGroup) {
		defer wg.Done()
		c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", e.echoPort)
		// The answer, or the end of a connection cut by the restart.
		_, _ = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	}
	for round := range 8 {
		var wg sync.WaitGroup
		for i := range 30 {
			if i == 10 {
				e.faults.Arm(fault.ProxyListen, fault.Rule{Kind: fault.KindError, Count: 1})
			}
			wg.Add(1)
			go client(&wg)
		}
		wg.Wait()
		testenv.Eventually(t, 5*time.Second, func() bool { return restartsOf(e.b, "proxy") == int64(round+1) },
			"proxy restart %d (have %d)", round+1, restartsOf(e.b, "proxy"))
	}
	e.faults.Disarm(fault.ProxyListen)
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT after the restarts: %d %s", code, body)
	}
	_ = c.Close()
	testenv.Eventually(t, 5*time.Second, func() bool {
		return e.b.OpenConns() == 0 && e.b.Stats().IdleConns.Load() == int64(connActorsAlive(e))
	}, "no connection left open (have %d), idle gauge %d = conn actors alive %d",
		e.b.OpenConns(), e.b.Stats().IdleConns.Load(), connActorsAlive(e))
}

// TestProxyListenPanic: a panic injected where the accept loop hands a
// connection over fails the proxy actor (restarted by its supervisor), not
// the process, and the next client is served.
func TestProxyListenPanic(t *testing.T) {
	e := startEnv(t, envOpts{})
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
	_ = c.Close()
	e.faults.Arm(fault.ProxyListen, fault.Rule{Kind: fault.KindPanic, Count: 1})
	if c, err := net.Dial("tcp", e.proxy); err == nil {
		_ = c.Close()
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return restartsOf(e.b, "proxy") == 1 }, "the proxy actor restarted")
	code, body, c = e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT after the listener's panic: %d %s", code, body)
	}
	_ = c.Close()
}
