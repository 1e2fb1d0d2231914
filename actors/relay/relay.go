// Package relay owns the gateway's SSH relay: the relay-listener actor
// that accepts both ends of a relay (a client that asked for one, and the
// supervisor told to dial back), pairs them by one-time tokens, and hands
// the pair to the sandbox's session actor, which splices them in a relay/N
// actor (stop on failure: that client's stream ends, siblings live). A
// supervisor dials out to the gateway, so relays work across hosts.
//
// Wire format: each side opens a TLS connection (its certificate: a client,
// or the supervisor of the sandbox the relay is for) to the relay address
// and sends one line, "STOCKADE-RELAY <token>\n"; after that the stream is
// the client's SSH connection to the sandbox's SSH server. A token is
// taken only from the identity it was made for.
package relay

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// Preamble starts the first line of each side of a relay (a contract
// between clients, supervisors and the gateway: contract.RelayPreamble).
const Preamble = contract.RelayPreamble

// PairTimeout bounds how long the first side of a relay waits for the other.
const PairTimeout = 10 * time.Second

// NewToken returns a random one-time token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Open sends the preamble with token on c.
func Open(c net.Conn, token string) error {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "%s%s\n", Preamble, token); err != nil {
		return fmt.Errorf("relay: send token: %w", err)
	}
	return nil
}

// Expect registers a relay to come: a client presenting ClientToken and
// the supervisor of Sandbox presenting SupervisorToken; the pair goes to
// Session.
type Expect struct {
	ClientToken, SupervisorToken string
	Session                      *actor.PID
	Sandbox                      string
}

// Pair is both ends of a relay, delivered to the session actor. The
// readers hold bytes already read past the preamble.
type Pair struct {
	Client, Supervisor       net.Conn
	ClientBuf, SupervisorBuf *bufio.Reader
}

// Taken is a session's answer to a Pair: it owns both ends now.
type Taken struct{}

type arrived struct {
	token string
	conn  net.Conn
	buf   *bufio.Reader
	peer  trust.Identity
}

type expired struct{ token string }

type pending struct {
	exp  *Expect
	pair Pair
}

// ListenerProps returns the relay-listener actor's props. The listener
// belongs to the caller (it survives a restart of the actor). adm decides
// which connections it takes (caps on those in their handshake, the
// descriptor reserve), bounds each one's handshake and token line
// (HandshakeTimeout), and counts and logs the refusals. v is the verifier
// of ln's TLS configuration: adm tracks each end of a relay from its
// token line on (Admission.Track), and its sweep closes an end whose
// certificate v no longer accepts (a client revoked while its exec,
// connect or port-forward runs), which ends the relay.
func ListenerProps(ln net.Listener, v *trust.Verifier, adm *transport.Admission, log zerolog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &listener{ln: ln, v: v, adm: adm, log: log, byToken: map[string]*pending{},
			refusals: audit.NewLineLimit(log, "relay", "refused relay connections", transport.DefaultLogRefusals, transport.DefaultLogWindow)}
	}, actor.WithReceiverMiddleware(supervise.PanicStack(log)))
}

type listener struct {
	ln      net.Listener
	v       *trust.Verifier
	adm     *transport.Admission
	log     zerolog.Logger
	byToken map[string]*pending
	quit    chan struct{}
	done    chan struct{}
	// refusals bounds the lines logging refused tokens (anyone with a
	// certificate may present tokens in a loop) and relays that expired.
	refusals *audit.DenialLimit
}

func (l *listener) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		l.start(ctx)
	case *Expect:
		p := &pending{exp: m}
		l.byToken[m.ClientToken], l.byToken[m.SupervisorToken] = p, p
		self, sys := ctx.Self(), ctx.ActorSystem()
		time.AfterFunc(PairTimeout, func() { sys.Root.Send(self, &expired{token: m.ClientToken}) })
	case *arrived:
		p, ok := l.byToken[m.token]
		if !ok {
			if l.refusals.Allow() {
				l.log.Warn().Str("from", m.conn.RemoteAddr().String()).Str("peer", m.peer.String()).Msg("relay: unknown or already used token")
			}
			_ = m.conn.Close()
			return
		}
		delete(l.byToken, m.token) // one-time
		want := trust.Identity{Role: trust.RoleSupervisor, Name: p.exp.Sandbox}
		if m.token == p.exp.ClientToken {
			want = trust.Identity{Role: trust.RoleClient, Name: m.peer.Name}
		}
		if m.peer != want {
			if l.refusals.Allow() {
				l.log.Warn().Str("peer", m.peer.String()).Str("sandbox", p.exp.Sandbox).Msg("relay: token presented by the wrong identity; refused")
			}
			_ = m.conn.Close()
			return
		}
		if m.token == p.exp.ClientToken {
			p.pair.Client, p.pair.ClientBuf = m.conn, m.buf
		} else {
			p.pair.Supervisor, p.pair.SupervisorBuf = m.conn, m.buf
		}
		if p.pair.Client != nil && p.pair.Supervisor != nil {
			pair := p.pair
			// The session takes the pair (Taken) or is gone (its
			// supervisor died, its sandbox moved): then nobody would
			// ever close the two ends, and the client would wait on
			// them for ever.
			f := ctx.RequestFuture(p.exp.Session, &pair, PairTimeout)
			log, sandbox := l.log, p.exp.Sandbox
			go func() {
				if _, err := f.Result(); err != nil {
					_ = pair.Client.Close()
					_ = pair.Supervisor.Close()
					log.Debug().Err(err).Str("sandbox", sandbox).Msg("relay: its session is gone; both ends closed")
				}
			}()
		}
	case *expired:
		l.expire(m.token)
	case *actor.Restarting, *actor.Stopping:
		l.stop()
		l.refusals.Flush()
	}
}

// expire drops a relay whose second side never came.
func (l *listener) expire(clientToken string) {
	var gone *pending
	for tok, p := range l.byToken {
		if p.exp.ClientToken == clientToken {
			delete(l.byToken, tok)
			gone = p
		}
	}
	if gone == nil {
		return // paired in time
	}
	for _, c := range []net.Conn{gone.pair.Client, gone.pair.Supervisor} {
		if c != nil {
			_ = c.Close()
		}
	}
	if l.refusals.Allow() { // a client may ask for relays it never uses, in a loop
		l.log.Warn().Str("sandbox", gone.exp.Sandbox).Bool("client_arrived", gone.pair.Client != nil).
			Bool("supervisor_arrived", gone.pair.Supervisor != nil).Msg("relay: the other side did not arrive in time")
	}
}

func (l *listener) start(ctx actor.Context) {
	l.quit, l.done = make(chan struct{}), make(chan struct{})
	self, sys := ctx.Self(), ctx.ActorSystem()
	go func() {
		defer close(l.done)
		for {
			c, err := l.ln.Accept()
			if err != nil {
				select {
				case <-l.quit:
					return
				default:
				}
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			// Here, not in the connection's goroutine: what this
			// listener holds is only what Admit let in.
			done, ok := l.adm.Admit(c)
			if !ok {
				continue // closed, counted and logged
			}
			go func() {
				tok, br, peer, leaf, err := readPreamble(c, l.adm.HandshakeTimeout())
				done()
				if err != nil {
					l.adm.HandshakeFailed(c, err)
					_ = c.Close()
					return
				}
				conn := c
				if leaf != nil {
					conn = l.adm.Track(c, peer, leaf, l.v)
				}
				sys.Root.Send(self, &arrived{token: tok, conn: conn, buf: br, peer: peer})
			}()
		}
	}()
}

func (l *listener) stop() {
	if l.quit == nil {
		return
	}
	close(l.quit)
	if d, ok := l.ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Unix(1, 0))
		<-l.done
		_ = d.SetDeadline(time.Time{})
	}
	l.quit = nil
}

// readPreamble completes the TLS handshake (on a TLS connection: the
// peer's identity and certificate) and reads the token line, both within
// timeout.
func readPreamble(c net.Conn, timeout time.Duration) (string, *bufio.Reader, trust.Identity, *x509.Certificate, error) {
	var peer trust.Identity
	var leaf *x509.Certificate
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return "", nil, peer, nil, fmt.Errorf("relay: handshake: %w", err)
		}
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 {
			return "", nil, peer, nil, errors.New("relay: no peer certificate")
		}
		id, err := trust.IdentityOf(certs[0])
		if err != nil {
			return "", nil, peer, nil, fmt.Errorf("relay: %w", err)
		}
		peer, leaf = id, certs[0]
	}
	br := bufio.NewReaderSize(c, 512)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", nil, peer, nil, fmt.Errorf("relay: read preamble: %w", err)
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, Preamble) || len(line) > len(Preamble)+64 {
		return "", nil, peer, nil, fmt.Errorf("relay: bad preamble %q", line)
	}
	return strings.TrimPrefix(line, Preamble), br, peer, leaf, nil
}

// ActorProps returns the props of one relay/N actor splicing a Pair.
func ActorProps(p *Pair, log zerolog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &relayActor{pair: p, log: log} })
}

// ChildName names the n-th relay child of a session.
func ChildName(n int) string { return "relay/" + strconv.Itoa(n) }

type relayDone struct{}

type relayActor struct {
	pair    *Pair
	log     zerolog.Logger
	running int
	start   time.Time
}

func (r *relayActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		r.start = time.Now()
		self, sys := ctx.Self(), ctx.ActorSystem()
		p := r.pair
		r.running = 2
		go func() { _, _ = proxy.Pipe(p.Supervisor, p.Client, p.ClientBuf); sys.Root.Send(self, &relayDone{}) }()
		go func() { _, _ = proxy.Pipe(p.Client, p.Supervisor, p.SupervisorBuf); sys.Root.Send(self, &relayDone{}) }()
	case *relayDone:
		if r.running--; r.running == 0 {
			ctx.Stop(ctx.Self())
		}
	case *actor.Stopping:
		_ = r.pair.Client.Close()
		_ = r.pair.Supervisor.Close()
		r.log.Debug().Str("relay", ctx.Self().Id).Dur("duration", time.Since(r.start)).Msg("relay closed")
	}
}
