package transport_test

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// TestFailedConnectionsRetired: an endpoint that cannot reach a peer gives
// up on it (EndpointTerminatedEvent) and leaves nothing dialling its
// address. protoactor's writer dials a new gRPC connection per attempt and
// forgets a failed one; unclosed, gRPC redials it in the background
// forever, so a peer that comes back on that address (a restarted gateway
// or supervisor) gets idle connections from every earlier attempt. The
// test takes a free port, lets the gateway endpoint fail to reach it, then
// listens there for longer than gRPC's first reconnect backoffs (1 s, then
// x1.6): no connection may arrive.
func TestFailedConnectionsRetired(t *testing.T) {
	g := useGateway(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ended := make(chan struct{})
	stop := transport.OnEndpointEnded(g.sys, addr, func() { close(ended) })
	defer stop()
	g.sys.Root.Send(actor.NewPID(addr, "gone"), &messages.Reply{Message: "to nobody"})
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("the endpoint to %s (nothing listening) did not end in 20 s", addr)
	}

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	defer ln.Close()
	var dialled atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if n := dialled.Load(); n > 0 {
			t.Fatalf("%d connection(s) to %s after its endpoint ended: a failed connect attempt's gRPC conn was not closed and still redials", n, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
