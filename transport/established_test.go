package transport_test

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// holdStream opens a stream to g as local user uid with conf and holds
// it (closed at cleanup).
func holdStream(t *testing.T, g *gateway, uid int, conf *tls.Config) (*transporttest.Stream, error) {
	t.Helper()
	c, err := transporttest.DialFrom(uid, g.addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Hold()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	t.Cleanup(s.Close)
	return s, nil
}

// holdIdle opens an idle authenticated connection to g (TLS, then the
// HTTP/2 preface and nothing more) as local user uid (-1: root); closed
// at cleanup.
func holdIdle(t *testing.T, g *gateway, uid int, kp tls.Certificate) net.Conn {
	t.Helper()
	c, err := transporttest.HoldIdle(uid, g.addr, transporttest.WithCert(kp), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reports whether the server closed c within wait, reading
// (and dropping) whatever it sends before: an HTTP/2 server's SETTINGS,
// GOAWAY and PING frames.
func closedWithin(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestIdentityConnsCap: client "hog", a local user's, holds its cap of
// established connections (gatewayLimits.ClientConns, each with an open
// stream); its next one, with the same certificate or a new one of the
// same name, is closed once its handshake ends, counted and logged
// (identity_conns), and hog's count stays at the cap. Meanwhile another
// client of the same user connects and is served, and root's connection
// with hog's certificate is not capped. When one of hog's connections
// closes, its place is free again.
func TestIdentityConnsCap(t *testing.T) {
	testenv.NeedRoot(t) // sockets of another user: root's are not capped
	g := useGateway(t)
	hog := trust.Identity{Role: trust.RoleClient, Name: "hog"}
	kp := g.cert(t, hog)
	limit := gatewayLimits.ClientConns
	var held []*transporttest.Stream
	for i := range limit {
		s, err := holdStream(t, g, nobodyUID, transporttest.WithCert(kp))
		if err != nil {
			t.Fatalf("hog's connection %d of %d: %v", i+1, limit, err)
		}
		held = append(held, s)
	}
	if n := g.ep.Admission().Conns(hog); n != limit {
		t.Fatalf("hog holds %d established connections, want %d", n, limit)
	}
	before := g.refused.Get(transport.ReasonIdentityConns)
	for name, conf := range map[string]*tls.Config{"same certificate": transporttest.WithCert(kp), "new certificate": transporttest.WithCert(g.cert(t, hog))} {
		if s, err := holdStream(t, g, nobodyUID, conf); err == nil {
			t.Fatalf("hog's connection over its cap (%s) holds a stream", name)
		} else if !transporttest.Refused(err) {
			t.Fatalf("hog's connection over its cap (%s): %v, want closed after its handshake", name, err)
		} else if s != nil {
			t.Fatal("a stream with an error")
		}
	}
	// A raw connection (no gRPC client to retry) is closed at once.
	if c := holdIdle(t, g, nobodyUID, kp); !closedWithin(c, 2*time.Second) {
		t.Fatal("hog's raw connection over its cap was held")
	}
	eventually(t, func() bool { return g.refused.Get(transport.ReasonIdentityConns) >= before+3 },
		"%s counted %d, want %d or more", transport.ReasonIdentityConns, g.refused.Get(transport.ReasonIdentityConns)-before, 3)
	eventually(t, func() bool {
		log := g.log.String()
		return strings.Contains(log, `"reason":"identity_conns"`) && strings.Contains(log, `"peer":"client:hog"`)
	}, "the refusal is not logged with its reason and identity")
	if n := g.ep.Admission().Conns(hog); n != limit {
		t.Fatalf("after the refusals hog holds %d established connections, want %d", n, limit)
	}
	for i, s := range held {
		if s.Ended(0) {
			t.Fatalf("hog's stream %d ended", i)
		}
	}

	// Another identity of the same user is served.
	other := trust.Identity{Role: trust.RoleClient, Name: "neighbour"}
	c, err := transporttest.DialFrom(nobodyUID, g.addr, transporttest.WithCert(g.cert(t, other)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		t.Fatalf("another client's request while hog holds its cap: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the other client's request")
	if got := g.recorded(transport.APIActor)[0]; got.peer != other {
		t.Fatalf("api received a message from %v, want %s", got.peer, other)
	}
	// Root's socket is not capped, whatever its certificate.
	if _, err := holdStream(t, g, 0, transporttest.WithCert(kp)); err != nil {
		t.Fatalf("root's connection with hog's certificate: %v", err)
	}
	if n := g.ep.Admission().Conns(hog); n != limit {
		t.Fatalf("root's connection counted against hog's cap: %d, want %d", n, limit)
	}

	// One of hog's connections ends: its place is free.
	held[0].Close()
	eventually(t, func() bool { return g.ep.Admission().Conns(hog) == limit-1 }, "hog holds %d, want %d once a stream closed",
		g.ep.Admission().Conns(hog), limit-1)
	if _, err := holdStream(t, g, nobodyUID, transporttest.WithCert(kp)); err != nil {
		t.Fatalf("hog below its cap again: %v", err)
	}
	g.serves(t, 1)
}

// TestIdleConnectionClosed: an authenticated connection that opens no
// stream (the TLS handshake, the HTTP/2 preface, then nothing: it does
// not even answer pings) is closed once gatewayLimits.IdleTimeout passes
// (then the 5 s gRPC gives a GOAWAY's ping), and its place is given back;
// a connection of the same identity with an open stream that carries
// nothing, as protoactor's endpoint writer keeps one, stays open.
func TestIdleConnectionClosed(t *testing.T) {
	g := useGateway(t)
	idler := trust.Identity{Role: trust.RoleClient, Name: "idler"}
	kp := g.cert(t, idler)
	stream, err := holdStream(t, g, 0, transporttest.WithCert(kp))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := holdIdle(t, g, -1, kp)
	limit := gatewayLimits.IdleTimeout + 5*time.Second + 3*time.Second
	if !closedWithin(c, limit) {
		t.Fatalf("an idle authenticated connection is held after %s (idle timeout %s)", limit, gatewayLimits.IdleTimeout)
	}
	d := time.Since(start)
	if d < gatewayLimits.IdleTimeout {
		t.Fatalf("the idle connection was closed after %s, before the idle timeout %s", d, gatewayLimits.IdleTimeout)
	}
	if stream.Ended(0) {
		t.Fatal("the connection with an open (quiet) stream was closed too")
	}
	if stream.Ended(gatewayLimits.IdleTimeout + time.Second) {
		t.Fatal("the connection with an open (quiet) stream was closed past the idle timeout")
	}
	t.Logf("idle connection closed after %s; a quiet stream's stays open", d.Round(10*time.Millisecond))
}

// TestRevokedConnectionsClosed: a client whose certificate is revoked
// while it holds a stream and an idle connection has both closed by the
// sweep within a few sweeps (gatewayLimits.SweepEvery), counted and
// logged (revoked); another client's stream stays open, and the revoked
// client's count of connections drops to none.
func TestRevokedConnectionsClosed(t *testing.T) {
	testenv.NeedRoot(t) // sockets of another user: root's are not counted
	g := useGateway(t)
	gone := trust.Identity{Role: trust.RoleClient, Name: "revokee"}
	kept := trust.Identity{Role: trust.RoleClient, Name: "keeper"}
	kpGone := g.cert(t, gone)
	sGone, err := holdStream(t, g, nobodyUID, transporttest.WithCert(kpGone))
	if err != nil {
		t.Fatal(err)
	}
	idle := holdIdle(t, g, nobodyUID, kpGone)
	sKept, err := holdStream(t, g, nobodyUID, transporttest.WithCert(g.cert(t, kept)))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return g.ep.Admission().Conns(gone) == 2 }, "revokee holds %d connections, want 2", g.ep.Admission().Conns(gone))
	before := g.refused.Get(transport.ReasonRevoked)
	g.revoke(kpGone)
	start := time.Now()
	within := 5 * gatewayLimits.SweepEvery
	if !sGone.Ended(within + time.Second) {
		t.Fatalf("the revoked client's stream is open %s after the revocation (sweep every %s)", within+time.Second, gatewayLimits.SweepEvery)
	}
	if !closedWithin(idle, within) {
		t.Fatal("the revoked client's idle connection is held")
	}
	t.Logf("revoked client's connections closed %s after the revocation", time.Since(start).Round(10*time.Millisecond))
	if sKept.Ended(2 * gatewayLimits.SweepEvery) {
		t.Fatal("another client's stream ended")
	}
	eventually(t, func() bool { return g.refused.Get(transport.ReasonRevoked) >= before+2 },
		"%s counted %d, want 2", transport.ReasonRevoked, g.refused.Get(transport.ReasonRevoked)-before)
	eventually(t, func() bool {
		log := g.log.String()
		return strings.Contains(log, `"reason":"revoked"`) && strings.Contains(log, `"peer":"client:revokee"`)
	}, "the closing is not logged with its reason and identity")
	if n := g.ep.Admission().Conns(gone); n != 0 {
		t.Fatalf("the revoked client still holds %d places", n)
	}
	if n := g.ep.Admission().Conns(kept); n != 1 {
		t.Fatalf("the other client holds %d places, want 1", n)
	}
	// The revoked certificate is refused at its next handshake, as before.
	if _, err := holdStream(t, g, nobodyUID, transporttest.WithCert(kpGone)); !transporttest.Refused(err) {
		t.Fatalf("the revoked certificate's new connection: %v, want refused", err)
	}
	g.serves(t, 0)
}
