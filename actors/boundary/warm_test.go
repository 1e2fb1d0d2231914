package boundary_test

import (
	"io"
	"net"
	"runtime/metrics"
	"testing"
	"time"
)

// goroutinesCreated reads how many goroutines the process has started.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("metric %s not supported by this Go", s[0].Name)
	}
	return s[0].Value.Uint64()
}

// TestTunnelsRunOnWarmWorkers: one tunnel after another starts no goroutine
// of the boundary's: the connection actor's mailbox and the relay from the
// upstream to the client run on the pools' warm workers, whose stacks have
// already grown (a goroutine started per tunnel grew its stack through the
// splice path almost every time: a tenth of a one-client tunnel's user
// time).
func TestTunnelsRunOnWarmWorkers(t *testing.T) {
	e := startEnv(t, envOpts{identityNone: true})
	tunnel := func() {
		code, body, c := e.connect(t, "up.test", e.echoPort)
		if code != 200 {
			t.Fatalf("CONNECT up.test: %d %s, want 200", code, body)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c) // the echo, then EOF when the upstream closes
		if err != nil || string(got) != "x" {
			t.Fatalf("through the tunnel: %q, %v; want the echo and EOF", got, err)
		}
	}
	for range 5 {
		tunnel()
	}
	const n = 200
	before := goroutinesCreated(t)
	for range n {
		tunnel()
	}
	created := goroutinesCreated(t) - before
	// The echo upstream starts one goroutine per connection (serveEach);
	// the rest are the boundary's, and warm workers need none per tunnel.
	// A pool may grow by a worker when a tunnel starts before the last one
	// has wound down: a few, not one per tunnel.
	if extra := int64(created) - n; extra > n/4 {
		t.Fatalf("%d tunnels started %d goroutines (%d beyond the echo upstream's one each), want at most %d beyond",
			n, created, extra, n/4)
	}
	t.Logf("%d tunnels started %d goroutines", n, created)
}
