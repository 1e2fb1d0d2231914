package transport_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
)

// TestEndpointHandshakeDeadline: at the gateway's endpoint a connection
// that sends nothing, and one that stops half-way through a ClientHello,
// are closed when the handshake timeout passes (gatewayLimits: 2 s;
// gRPC's own default was 120 s), and counted; the endpoint serves on.
func TestEndpointHandshakeDeadline(t *testing.T) {
	g := useGateway(t)
	before := g.refused.Get(transport.ReasonHandshakeTimeout)
	silent, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	partial, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer partial.Close()
	// A TLS record header announcing a 512-byte handshake message, and
	// 10 bytes of it.
	if _, err := partial.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for name, c := range map[string]net.Conn{"silent": silent, "partial": partial} {
		if !closedAtOnce(c, 10*time.Second) {
			t.Fatalf("%s: held for 10 s", name)
		}
		if d := time.Since(start); d < gatewayLimits.HandshakeTimeout-200*time.Millisecond || d > gatewayLimits.HandshakeTimeout+3*time.Second {
			t.Fatalf("%s: closed after %s, want about %s", name, d, gatewayLimits.HandshakeTimeout)
		}
	}
	eventually(t, func() bool { return g.refused.Get(transport.ReasonHandshakeTimeout) == before+2 },
		"%s counted %d, want %d", transport.ReasonHandshakeTimeout, g.refused.Get(transport.ReasonHandshakeTimeout), before+2)
	g.serves(t, 0)
}

// TestEndpointPendingCaps: at the gateway's endpoint, local user 65534
// holds the per-source cap of silent connections; its next one is closed
// at once (not after the handshake timeout), counted and logged with its
// source. Root's requests are still served meanwhile. Filling the total
// cap with more users closes their next connection at once, but not
// root's: the local admin is served while many users fill the cap.
func TestEndpointPendingCaps(t *testing.T) {
	testenv.NeedRoot(t) // to make sockets of other users
	g := useGateway(t)
	held := 0
	hold := func(uid, n int) {
		t.Helper()
		for range n {
			dialAs(t, uid, g.addr)
		}
		// Accepted in the background: wait until the endpoint holds them.
		held += n
		eventually(t, func() bool { return g.pendingTotal() == held },
			"the endpoint holds %d connections in their handshake, want %d", g.pendingTotal(), held)
	}
	before := g.refused.Get(transport.ReasonPendingSource)
	hold(nobodyUID, gatewayLimits.PendingPerSource)
	if c := dialAs(t, nobodyUID, g.addr); !closedAtOnce(c, gatewayLimits.HandshakeTimeout/2) {
		t.Fatal("uid 65534's connection over the per-source cap was held")
	}
	eventually(t, func() bool { return g.refused.Get(transport.ReasonPendingSource) == before+1 }, "the refusal is not counted")
	eventually(t, func() bool {
		log := g.log.String()
		return strings.Contains(log, `"reason":"pending_source"`) && strings.Contains(log, `"source":"uid:65534"`)
	}, "the refusal is not logged with its reason and source")
	g.serves(t, 0)

	// The total cap: 4 more users hold 8 each (40 with 65534's).
	totalBefore := g.refused.Get(transport.ReasonPendingTotal)
	for uid := otherUID; uid > otherUID-4; uid-- {
		hold(uid, gatewayLimits.PendingPerSource)
	}
	if c := dialAs(t, otherUID-10, g.addr); !closedAtOnce(c, gatewayLimits.HandshakeTimeout/2) {
		t.Fatal("a connection over the total cap was held")
	}
	if n := g.refused.Get(transport.ReasonPendingTotal) - totalBefore; n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonPendingTotal, n)
	}
	// Root, with the total cap full: served (it counts in the total).
	if err := g.as(t, alice).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		t.Fatalf("root's request while other users fill the total cap: %v, want served", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 3 },
		"api received %d messages, want the two of serves and root's", len(g.recorded(transport.APIActor)))
	if got := g.recorded(transport.APIActor)[2]; got.peer != alice {
		t.Fatalf("api's last message is from %v, want root's (%s)", got.peer, alice)
	}
	if n := g.refused.Get(transport.ReasonPendingTotal) - totalBefore; n != 1 {
		t.Fatalf("%s counted %d after root's request, want still 1", transport.ReasonPendingTotal, n)
	}
}
