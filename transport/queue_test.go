package transport_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/messages"
)

// TestNewPeerCostsLittle: the first message to a new peer makes that
// peer's send queue. protoactor's default queue is 1,000,000 entries (16
// MB), made for each peer by one actor in turn; a gateway that adopted 20
// supervisors held 200 MB and a takeover's first messages waited for the
// allocations. Eight new peers must together allocate less than one such
// queue.
func TestNewPeerCostsLittle(t *testing.T) {
	g := useGateway(t)
	var addrs []string
	for range 8 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		_ = l.Close() // nothing answers there: the message waits in the queue
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, a := range addrs {
		g.sys.Root.Send(actor.NewPID(a, "anyone"), &messages.Reconnect{Gateway: g.addr})
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew >= 16<<20 {
		t.Errorf("8 new peers allocated %d MB; want less than 16 MB (one queue of protoactor's default size)", grew>>20)
	}
}
