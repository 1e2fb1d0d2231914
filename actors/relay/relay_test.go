package relay

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// pki is a CA and what it issues, for the relay's TLS; its verifier
// asks revoked.
type pki struct {
	t       *testing.T
	ca      *trust.CA
	ver     *trust.Verifier
	node    tls.Certificate
	revoked transporttest.Revocations
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, _, err := trust.LoadOrCreateCA(t.TempDir() + "/pki")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := trust.Pool(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, ca: ca}
	p.ver = &trust.Verifier{CAs: pool, Revoked: p.revoked.Revoked}
	p.node = p.cert(trust.Identity{Role: trust.RoleGateway, Name: "n1"})
	return p
}

func (p *pki) cert(id trust.Identity) tls.Certificate {
	p.t.Helper()
	certPEM, keyPEM, _, err := p.ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

// relayWorld is the relay-listener actor on a real TLS listener, and a
// session stand-in that splices each Pair it gets in a relay/N actor.
type relayWorld struct {
	*pki
	sys      *actor.ActorSystem
	listener *actor.PID
	session  *actor.PID
	addr     string
	log      *testenv.Buffer
	adm      *transport.Admission
}

func newRelayWorld(t *testing.T) *relayWorld {
	t.Helper()
	return newRelayWorldWith(t, transport.Limits{})
}

// newRelayWorldWith is newRelayWorld with the listener's limits.
func newRelayWorldWith(t *testing.T, limits transport.Limits) *relayWorld {
	t.Helper()
	w := &relayWorld{pki: newPKI(t), sys: actor.NewActorSystem(), log: &testenv.Buffer{}}
	log := zerolog.New(w.log)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.addr = tcp.Addr().String()
	ln := tls.NewListener(tcp, trust.ServerConfig(w.node, w.ver))
	n := 0
	w.session = w.sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if p, ok := c.Message().(*Pair); ok {
			n++
			if _, err := c.SpawnNamed(ActorProps(p, log), ChildName(n)); err != nil {
				t.Errorf("spawn relay: %v", err)
			}
			c.Respond(&Taken{})
		}
	}))
	w.adm = transport.NewAdmission(limits, nil, log)
	w.listener = w.sys.Root.Spawn(ListenerProps(ln, w.ver, w.adm, log))
	t.Cleanup(func() {
		_ = w.sys.Root.StopFuture(w.listener).Wait()
		_ = tcp.Close()
		w.sys.Shutdown()
		_ = w.adm.Close()
		if t.Failed() {
			t.Logf("log:\n%s", w.log)
		}
	})
	return w
}

// dial opens a TLS connection as id and sends the preamble with token.
func (w *relayWorld) dial(id trust.Identity, token string) net.Conn {
	w.t.Helper()
	return w.dialWith(w.cert(id), token)
}

// dialWith is dial with the key pair kp.
func (w *relayWorld) dialWith(kp tls.Certificate, token string) net.Conn {
	w.t.Helper()
	c, err := tls.Dial("tcp", w.addr, trust.ClientConfig(kp, w.ver))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	if err := Open(c, token); err != nil {
		w.t.Fatal(err)
	}
	return c
}

// expect registers a relay for sandbox and returns its two tokens.
func (w *relayWorld) expect(sandbox string) (client, sup string) {
	client, sup = NewToken(), NewToken()
	w.sys.Root.Send(w.listener, &Expect{ClientToken: client, SupervisorToken: sup, Session: w.session, Sandbox: sandbox})
	return client, sup
}

// closed reports whether c is closed by the other side within d.
func closed(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF || (err != nil && !isTimeout(err))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestRelayPairsAndSplices: a client and the supervisor of the sandbox
// with their tokens are paired and spliced both ways, including bytes
// sent right behind the preamble.
func TestRelayPairsAndSplices(t *testing.T) {
	w := newRelayWorld(t)
	ct, st := w.expect("box")
	cl := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct)
	if _, err := cl.Write([]byte("early bytes\n")); err != nil { // before the other side came
		t.Fatal(err)
	}
	sup := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "box"}, st)
	r := bufio.NewReader(sup)
	_ = sup.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "early bytes\n" {
		t.Fatalf("supervisor side read %q, %v", line, err)
	}
	if _, err := sup.Write([]byte("SSH-2.0-sandbox\n")); err != nil {
		t.Fatal(err)
	}
	_ = cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(cl).ReadString('\n'); err != nil || line != "SSH-2.0-sandbox\n" {
		t.Fatalf("client side read %q, %v", line, err)
	}
	// One side closing ends the relay: the other is closed too.
	_ = cl.Close()
	if !closed(sup, 5*time.Second) {
		t.Fatal("the supervisor side stayed open after the client left")
	}
}

// TestRelayRefusesAttackers: a token is taken once, only from the
// identity it was made for; a wrong preamble or an unknown token is
// refused; and a refused attempt does not spend a legitimate token.
func TestRelayRefusesAttackers(t *testing.T) {
	w := newRelayWorld(t)
	ct, st := w.expect("box")

	// The supervisor's token from another sandbox's supervisor, and from a
	// client: refused, and the token is spent (one-time), so the real
	// supervisor cannot be impersonated after a leak either.
	wrong := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "other"}, st)
	if !closed(wrong, 5*time.Second) {
		t.Fatal("a supervisor of another sandbox was admitted with box's token")
	}
	if !strings.Contains(w.log.String(), "token presented by the wrong identity") {
		t.Fatalf("the refusal is not logged:\n%s", w.log)
	}
	// An unknown token and a bad preamble.
	if c := w.dial(trust.Identity{Role: trust.RoleClient, Name: "mallory"}, NewToken()); !closed(c, 5*time.Second) {
		t.Fatal("an unknown token was admitted")
	}
	raw, err := tls.Dial("tcp", w.addr, trust.ClientConfig(w.cert(trust.Identity{Role: trust.RoleClient, Name: "mallory"}), w.ver))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if !closed(raw, 5*time.Second) {
		t.Fatal("a bad preamble was admitted")
	}
	// No certificate at all: the TLS handshake fails.
	if c, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: w.ver.CAs, ServerName: "x", InsecureSkipVerify: true}); err == nil {
		if _, werr := c.Write([]byte(Preamble + ct + "\n")); werr == nil && !closed(c, 5*time.Second) {
			t.Fatal("a connection without a certificate was admitted")
		}
		_ = c.Close()
	}
	// The client's token still works for the client (any client name).
	cl := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct)
	if closed(cl, 300*time.Millisecond) {
		t.Fatal("the legitimate client was refused after the attacks")
	}
}

// TestRelayExpires: a relay whose second side never comes is dropped after
// PairTimeout... shortened here by expiring it directly.
func TestRelayExpires(t *testing.T) {
	w := newRelayWorld(t)
	ct, _ := w.expect("box")
	cl := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct)
	time.Sleep(100 * time.Millisecond) // the arrival is registered
	w.sys.Root.Send(w.listener, &expired{token: ct})
	if !closed(cl, 5*time.Second) {
		t.Fatal("a half relay outlived its expiry")
	}
	// Its tokens are gone: a late supervisor is refused.
	if late := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct); !closed(late, 5*time.Second) {
		t.Fatal("an expired token was admitted")
	}
}

// TestRelayListenerBounded: local user 65534 holds the per-source cap of
// silent connections at the relay listener; its next one is closed at
// once and counted; the silent ones are closed when the handshake timeout
// passes (counted too); a relay between a client and the sandbox's
// supervisor (root's connections) is paired meanwhile.
func TestRelayListenerBounded(t *testing.T) {
	testenv.NeedRoot(t) // to make sockets of another user
	w := newRelayWorldWith(t, transport.Limits{PendingPerSource: 2, HandshakeTimeout: time.Second})
	var silent []net.Conn
	for range 2 {
		c, err := transporttest.DialAs(65534, w.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { total, _ := w.adm.Pending(); return total == 2 }, "the listener holds the 2 silent connections")
	over, err := transporttest.DialAs(65534, w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if !closed(over, 500*time.Millisecond) {
		t.Fatal("uid 65534's 3rd connection is held over the per-source cap")
	}
	if n := w.adm.Refusals().Get(transport.ReasonPendingSource); n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonPendingSource, n)
	}
	ct, st := w.expect("box")
	cl := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct)
	sup := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "box"}, st)
	if _, err := cl.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	_ = sup.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(sup).ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("the relay did not pair beside the silent connections: %q, %v", line, err)
	}
	for _, c := range silent {
		if !closed(c, 5*time.Second) {
			t.Fatal("a silent connection is held past the handshake timeout")
		}
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return w.adm.Refusals().Get(transport.ReasonHandshakeTimeout) == 2 },
		"the 2 timeouts are not counted (%d)", w.adm.Refusals().Get(transport.ReasonHandshakeTimeout))
}

// TestRelayRefusalLogBounded plays F7's attacker at the relay: 1,000
// connections that present unknown tokens (anyone with a certificate may)
// and 1,000 that present a token made for another identity. Each is
// closed, but the gateway's log keeps at most transport.DefaultLogRefusals
// lines of them, then one line with the count of the rest (at the end of
// the window, or when the listener stops).
func TestRelayRefusalLogBounded(t *testing.T) {
	w := newRelayWorld(t)
	const flood = 1000
	var conns []net.Conn
	for i := 0; i < 2*flood; i++ {
		token := NewToken()
		if i >= flood { // a token made for box's supervisor, from a client
			_, token = w.expect("box")
		}
		ours, theirs := net.Pipe()
		conns = append(conns, theirs)
		w.sys.Root.Send(w.listener, &arrived{token: token, conn: ours, peer: trust.Identity{Role: trust.RoleClient, Name: "mallory"}})
	}
	for i, c := range conns {
		if !closed(c, 5*time.Second) {
			t.Fatalf("refused connection %d is open", i)
		}
	}
	if err := w.sys.Root.StopFuture(w.listener).Wait(); err != nil { // its count is reported
		t.Fatal(err)
	}
	lines, reports, notLogged := testenv.LimitedLines(w.log.String(), "relay", func(msg string) bool {
		return strings.HasPrefix(msg, "relay: unknown or already used token") || strings.HasPrefix(msg, "relay: token presented by the wrong identity")
	})
	t.Logf("%d refused relay connections: %d lines, %d report(s) counting %d, log %d bytes", 2*flood, lines, reports, notLogged, len(w.log.String()))
	if lines == 0 || lines > transport.DefaultLogRefusals {
		t.Fatalf("%d refusal lines, want 1 to %d", lines, transport.DefaultLogRefusals)
	}
	if reports != 1 || lines+notLogged != 2*flood {
		t.Fatalf("%d reports counting %d, want one counting %d", reports, notLogged, 2*flood-lines)
	}
}

// echoes reports whether bytes written on from come out of to within d.
func echoes(t *testing.T, from, to net.Conn, d time.Duration) bool {
	t.Helper()
	if _, err := from.Write([]byte("ping\n")); err != nil {
		return false
	}
	_ = to.SetReadDeadline(time.Now().Add(d))
	defer to.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(to).ReadString('\n')
	return err == nil && line == "ping\n"
}

// TestRelayRevokedClientClosed: two relays run, alice's into box and
// bob's into box2; alice's certificate is revoked. The sweep closes
// alice's end within a few sweeps, which ends her relay (box's side is
// closed too), counted and logged (revoked); bob's relay still carries
// bytes both ways.
func TestRelayRevokedClientClosed(t *testing.T) {
	w := newRelayWorldWith(t, transport.Limits{SweepEvery: 100 * time.Millisecond})
	alice := w.cert(trust.Identity{Role: trust.RoleClient, Name: "alice"})
	ct1, st1 := w.expect("box")
	ct2, st2 := w.expect("box2")
	cl1 := w.dialWith(alice, ct1)
	sup1 := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "box"}, st1)
	cl2 := w.dial(trust.Identity{Role: trust.RoleClient, Name: "bob"}, ct2)
	sup2 := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "box2"}, st2)
	for i, p := range [][2]net.Conn{{cl1, sup1}, {sup1, cl1}, {cl2, sup2}, {sup2, cl2}} {
		if !echoes(t, p[0], p[1], 5*time.Second) {
			t.Fatalf("relay direction %d does not carry bytes", i)
		}
	}
	w.revoked.Revoke(alice)
	start := time.Now()
	if !closed(cl1, 3*time.Second) {
		t.Fatal("the revoked client's relay end is open 3 s after the revocation (sweep every 100 ms)")
	}
	if !closed(sup1, 3*time.Second) {
		t.Fatal("the revoked client's relay still holds the supervisor's side")
	}
	t.Logf("the revoked client's relay ended %s after the revocation", time.Since(start).Round(10*time.Millisecond))
	for i, p := range [][2]net.Conn{{cl2, sup2}, {sup2, cl2}} {
		if !echoes(t, p[0], p[1], 5*time.Second) {
			t.Fatalf("bob's relay, direction %d, stopped carrying bytes", i)
		}
	}
	if n := w.adm.Refusals().Get(transport.ReasonRevoked); n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonRevoked, n)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(w.log.String(), `"reason":"revoked"`) && strings.Contains(w.log.String(), `"peer":"client:alice"`)
	}, "the closing is not logged with its reason and identity")
}

// TestPairForAGoneSessionIsClosed: a relay that pairs after its session
// stopped (its supervisor died as the relay was made, its sandbox moved to
// another node) has both ends closed at once; the client does not wait on
// them for ever.
func TestPairForAGoneSessionIsClosed(t *testing.T) {
	w := newRelayWorld(t)
	if err := w.sys.Root.StopFuture(w.session).Wait(); err != nil {
		t.Fatal(err)
	}
	ct, st := w.expect("box")
	c := w.dial(trust.Identity{Role: trust.RoleClient, Name: "alice"}, ct)
	s := w.dial(trust.Identity{Role: trust.RoleSupervisor, Name: "box"}, st)
	if !closed(c, 5*time.Second) || !closed(s, 5*time.Second) {
		t.Fatal("the ends of a relay whose session is gone are still open")
	}
}
