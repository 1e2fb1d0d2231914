package transport_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/remote"

	"github.com/stockade-dev/stockade/transport"
)

// TestOnEndpointEnded: fn runs once for its address, never for another
// address, and not after stop.
func TestOnEndpointEnded(t *testing.T) {
	sys := quiet()
	defer sys.Shutdown()
	calls := 0
	stop := transport.OnEndpointEnded(sys, "a:1", func() { calls++ })
	sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: "b:1"})
	if calls != 0 {
		t.Fatalf("fn ran %d times for another address", calls)
	}
	sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: "a:1"})
	sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: "a:1"})
	if calls != 1 {
		t.Fatalf("fn ran %d times for two ends of its address, want once", calls)
	}
	stop()
	other := 0
	stop2 := transport.OnEndpointEnded(sys, "a:1", func() { other++ })
	defer stop2()
	sys.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: "a:1"})
	if calls != 1 || other != 1 {
		t.Fatalf("after stop: first fn ran %d times (want 1), second %d (want 1)", calls, other)
	}
}
