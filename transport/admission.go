package transport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/identity"
)

// Defaults of Limits.
const (
	// DefaultHandshakeTimeout bounds a connection's handshake.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultPendingPerSource caps one source's connections in their
	// handshake.
	DefaultPendingPerSource = 64
	// DefaultPendingTotal caps all connections in their handshake.
	DefaultPendingTotal = 1024
	// DefaultLogRefusals refusal lines are logged per DefaultLogWindow; the
	// rest are counted, and their number is logged when the window ends.
	DefaultLogRefusals = 20
	DefaultLogWindow   = time.Minute
	// DefaultClientConns caps the established connections of one client
	// identity. A CLI process holds one connection per gateway for its
	// life, so this is 256 CLI processes of one client at once on one
	// node: a script that runs them in parallel (xargs -P, a CI fleet
	// sharing a certificate) stays far below it, and one identity holds
	// at most 256 descriptors of the node.
	DefaultClientConns = 256
	// DefaultSupervisorConns caps a supervisor's: it holds one session
	// connection to each gateway node it talks to (two for a moment while
	// a failed one is replaced).
	DefaultSupervisorConns = 16
	// DefaultGatewayConns caps a gateway node's at another node: one
	// connection per peer endpoint, a few while a restarted peer's are
	// replaced.
	DefaultGatewayConns = 64
	// DefaultIdleTimeout closes an endpoint's connection that has had no
	// gRPC stream for this long. protoactor opens one Receive stream on
	// each connection as soon as it is made and keeps it for the
	// connection's life (the endpoint writer's stream, which carries
	// every message to that peer, a logs stream's included), so only a
	// peer that never opens one is idle.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultSweepEvery is how often the certificates of the open
	// connections are checked again (revoked).
	DefaultSweepEvery = 2 * time.Second
)

// Limits bound what a listener holds for peers that have not proven who
// they are (connections still in their handshake), and for each identity
// that has (its established connections, how long one may idle, how
// soon a revoked certificate's are closed). A connection over a limit is
// closed as soon as it is accepted, or its handshake done, counted
// (stockade_remote_refused_total{reason}) and logged (LogRefusals lines
// per LogWindow, then one line with the number left out). The zero value
// is the defaults.
type Limits struct {
	// HandshakeTimeout bounds a connection's handshake: TLS, and then the
	// HTTP/2 preface at an endpoint, the relay's token line at the relay
	// listener (0: DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// PendingPerSource caps the connections of one source in their
	// handshake (0: DefaultPendingPerSource). A source is the user owning
	// the peer's socket when the peer is a local process (found with an
	// exact sock_diag lookup: every local user connects from 127.0.0.1),
	// else the peer's IP address (an IPv6 address's /64). Root and this
	// process's own user (privileged sources) are not capped per source:
	// either could stop this process anyway.
	PendingPerSource int
	// PendingTotal caps all connections in their handshake (0:
	// DefaultPendingTotal, at most a quarter of the descriptors below the
	// reserve). Privileged sources count in it but are not refused by it:
	// other users filling it do not lock the local admin out.
	PendingTotal int
	// DescriptorReserve keeps this many descriptors for work already
	// admitted (the boundary's connections, a session, requests on
	// connections already open): a connection is refused at accept when
	// the descriptor it was given is within the reserve of
	// DescriptorLimit (0: a tenth of the limit, 32 to 4096; negative: no
	// reserve). A privileged source's connection may use the reserve's
	// lower half; its upper half is no one's.
	DescriptorReserve int
	// DescriptorLimit is the limit the reserve is kept below (0:
	// RLIMIT_NOFILE when the Admission is made).
	DescriptorLimit int
	// LogRefusals and LogWindow bound the refusal lines (0:
	// DefaultLogRefusals per DefaultLogWindow).
	LogRefusals int
	LogWindow   time.Duration

	// ClientConns, SupervisorConns and GatewayConns cap the connections
	// one identity of that role holds at once at an endpoint once their
	// handshake is done (0: DefaultClientConns, DefaultSupervisorConns,
	// DefaultGatewayConns, each at most an eighth of the descriptors below
	// the reserve, so that no one identity reaches the reserve). A
	// connection over its identity's cap is closed at once
	// (ReasonIdentityConns). Connections whose socket is root's or this
	// process's user's are not capped: either could stop this process
	// anyway.
	ClientConns     int
	SupervisorConns int
	GatewayConns    int
	// IdleTimeout closes an endpoint's connection with no stream open for
	// this long (gRPC's MaxConnectionIdle: a GOAWAY, then the connection
	// is closed; 0: DefaultIdleTimeout).
	IdleTimeout time.Duration
	// SweepEvery is how often the certificate of every established
	// connection is checked again against its verifier's revocation check
	// (trust.Verifier.Revoked); a revoked one's connection is closed
	// (ReasonRevoked; 0: DefaultSweepEvery).
	SweepEvery time.Duration
}

// Refusal reasons of a listener (the label of stockade_remote_refused_total).
const (
	ReasonHandshakeTimeout = "handshake_timeout" // the handshake did not end within Limits.HandshakeTimeout
	ReasonPendingSource    = "pending_source"    // the source has Limits.PendingPerSource connections in their handshake
	ReasonPendingTotal     = "pending_total"     // Limits.PendingTotal connections are in their handshake
	ReasonDescriptors      = "descriptors"       // accepted within Limits.DescriptorReserve of the descriptor limit
	ReasonIdentityConns    = "identity_conns"    // the peer's identity holds its cap of established connections (Limits.ClientConns, ...)
	ReasonRevoked          = "revoked"           // an open connection's certificate was revoked since its handshake: closed by the sweep
)

// Admission decides at accept which connections a listener takes, and
// logs and counts what the listener refuses. A process shares one among
// its listeners (a gateway's API and relay): the caps and the log's bound
// are then the process's.
type Admission struct {
	limits   Limits
	fdLimit  int // the descriptor limit
	fdRefuse int // refuse a connection given this descriptor or a higher one; 0: never
	// fdRefusePrivileged is fdRefuse for root's and this user's
	// connections: they may use the lower half of the reserve.
	fdRefusePrivileged int
	refused            *Refusals
	log                zerolog.Logger
	lines              *audit.DenialLimit
	self               uint32 // this process's effective uid

	ownersOnce sync.Once
	owners     *identity.SocketOwners // nil when sock_diag is not available: sources are addresses

	mu       sync.Mutex
	total    int
	bySource map[source]int

	est established // connections past their handshake (established.go)
}

// NewAdmission returns an Admission with limits (zero fields: the
// defaults) that counts its refusals in refused (nil: a fresh set) and
// logs them to log.
func NewAdmission(limits Limits, refused *Refusals, log zerolog.Logger) *Admission {
	if refused == nil {
		refused = NewRefusals()
	}
	l := limits
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.PendingPerSource <= 0 {
		l.PendingPerSource = DefaultPendingPerSource
	}
	if l.LogRefusals <= 0 {
		l.LogRefusals = DefaultLogRefusals
	}
	if l.LogWindow <= 0 {
		l.LogWindow = DefaultLogWindow
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.SweepEvery <= 0 {
		l.SweepEvery = DefaultSweepEvery
	}
	a := &Admission{refused: refused, log: log, self: uint32(os.Geteuid()), bySource: map[source]int{}}
	a.fdLimit = l.DescriptorLimit
	if a.fdLimit <= 0 {
		a.fdLimit = descriptorLimit()
	}
	if l.DescriptorReserve == 0 {
		l.DescriptorReserve = min(max(a.fdLimit/10, 32), 4096)
	}
	if l.DescriptorReserve > 0 && a.fdLimit > l.DescriptorReserve {
		a.fdRefuse = a.fdLimit - l.DescriptorReserve
		a.fdRefusePrivileged = a.fdLimit - l.DescriptorReserve/2
	}
	if l.PendingTotal <= 0 {
		l.PendingTotal = DefaultPendingTotal
		if a.fdRefuse > 0 {
			l.PendingTotal = min(l.PendingTotal, max(a.fdRefuse/4, 1))
		}
	}
	// No one identity may take more than an eighth of the descriptors
	// below the reserve.
	share := 0
	if a.fdRefuse > 0 {
		share = max(a.fdRefuse/8, 1)
	}
	for _, c := range []struct {
		n   *int
		def int
	}{{&l.ClientConns, DefaultClientConns}, {&l.SupervisorConns, DefaultSupervisorConns}, {&l.GatewayConns, DefaultGatewayConns}} {
		if *c.n <= 0 {
			*c.n = c.def
			if share > 0 {
				*c.n = min(*c.n, share)
			}
		}
	}
	a.limits = l
	a.est.init()
	max, window := l.LogRefusals, l.LogWindow
	a.lines = audit.NewDenialLimit(log, max, window, audit.WithLimitReport(func(n int, since time.Time) {
		log.Warn().Str("component", "transport").Int("refusalsNotLogged", n).Time("since", since).
			Int("limit", max).Dur("window", window).
			Msgf("%d remote refusals since %s were not logged (each is counted in stockade_remote_refused_total): the log keeps %d per %s",
				n, since.UTC().Format(time.RFC3339), max, window)
	}))
	return a
}

// descriptorLimit is RLIMIT_NOFILE's soft limit (0 when unknown: no
// reserve). Go raises it to the hard limit at start.
func descriptorLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}

// Limits returns the limits in force (defaults filled in).
func (a *Admission) Limits() Limits { return a.limits }

// Refusals returns the counters of a's refusals.
func (a *Admission) Refusals() *Refusals { return a.refused }

// HandshakeTimeout is Limits().HandshakeTimeout.
func (a *Admission) HandshakeTimeout() time.Duration { return a.limits.HandshakeTimeout }

// source is who a pending connection is counted against.
type source struct {
	local bool   // a local process: uid names it
	uid   uint32 // the owner of the peer's socket
	ip    netip.Addr
}

func (s source) String() string {
	switch {
	case s.local:
		return fmt.Sprintf("uid:%d", s.uid)
	case s.ip.Is6() && !s.ip.Is4In6():
		return "ip:" + netip.PrefixFrom(s.ip, 64).String()
	default:
		return "ip:" + s.ip.String()
	}
}

// Admit decides whether c, just accepted, may start its handshake. When it
// may, done must be called once the handshake has ended, whichever way.
// When it may not, c is closed and the refusal counted and logged.
//
// Checked in this order: the descriptor reserve's upper half, which no
// one may use (the descriptor c was given: the kernel hands out the
// lowest free one, so when it is within the reserve of the limit, every
// descriptor below it is in use); then the source (a sock_diag lookup for
// a local peer); then the rest of the reserve, the total cap and the
// source's cap, none of which refuses root or this process's user (a
// privileged source): they may use the lower half of the reserve, and
// many sources filling the total cap cannot lock the local admin out.
// Only connections past every check count in the caps: a listener that
// calls Admit in its accept loop (the relay's) holds no other connection,
// and one whose accept loop is not its own (gRPC's hands each connection
// to a goroutine first) holds what waits for its goroutine until Admit
// runs there.
func (a *Admission) Admit(c net.Conn) (done func(), ok bool) {
	_, done, ok = a.admit(c)
	return done, ok
}

// admit is Admit; it also returns whether c's source is privileged.
func (a *Admission) admit(c net.Conn) (privileged bool, done func(), ok bool) {
	raw := rawConn(c)
	fd := fdOf(raw)
	if a.fdRefusePrivileged > 0 && fd >= a.fdRefusePrivileged {
		a.turnAway(c, ReasonDescriptors, "", a.reserveErr(fd, a.fdLimit-a.fdRefusePrivileged))
		return false, nil, false
	}
	src := a.sourceOf(raw)
	privileged = a.privileged(src)
	if a.fdRefuse > 0 && fd >= a.fdRefuse && !privileged {
		a.turnAway(c, ReasonDescriptors, src.String(), a.reserveErr(fd, a.fdLimit-a.fdRefuse))
		return false, nil, false
	}
	a.mu.Lock()
	switch {
	case !privileged && a.total >= a.limits.PendingTotal:
		a.mu.Unlock()
		a.turnAway(c, ReasonPendingTotal, src.String(), fmt.Errorf("%d connections are in their handshake (the cap)", a.limits.PendingTotal))
		return false, nil, false
	case !privileged && a.bySource[src] >= a.limits.PendingPerSource:
		a.mu.Unlock()
		a.turnAway(c, ReasonPendingSource, src.String(), fmt.Errorf("this source has %d connections in their handshake (the cap)", a.limits.PendingPerSource))
		return false, nil, false
	}
	a.total++
	a.bySource[src]++
	a.mu.Unlock()
	var once sync.Once
	return privileged, func() { once.Do(func() { a.release(src) }) }, true
}

// reserveErr says why a connection given descriptor fd was refused: kept
// is how many descriptors at the top of the limit it may not use.
func (a *Admission) reserveErr(fd, kept int) error {
	return fmt.Errorf("accepted as descriptor %d of %d: the last %d are kept for work already admitted", fd, a.fdLimit, kept)
}

// privileged reports whether src is root or this process's user: a local
// peer that could stop this process anyway.
func (a *Admission) privileged(src source) bool {
	return src.local && (src.uid == 0 || src.uid == a.self)
}

// rawConn is the network connection under c (a TLS connection's).
func rawConn(c net.Conn) net.Conn {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return nc.NetConn()
	}
	return c
}

func (a *Admission) release(src source) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if a.bySource[src]--; a.bySource[src] <= 0 {
		delete(a.bySource, src)
	}
}

// Pending returns the connections in their handshake: in all, and of the
// busiest source.
func (a *Admission) Pending() (total, busiest int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.bySource {
		busiest = max(busiest, n)
	}
	return a.total, busiest
}

// sourceOf is who c counts against: the owner of the peer's socket when it
// is in this network namespace, else the peer's address.
func (a *Admission) sourceOf(c net.Conn) source {
	peer, local := addrPort(c.RemoteAddr()), addrPort(c.LocalAddr())
	ip := peer.Addr().Unmap()
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	if !peer.IsValid() || !local.IsValid() {
		return source{ip: ip}
	}
	a.ownersOnce.Do(func() {
		o, err := identity.OpenSocketOwners()
		if err != nil {
			a.log.Warn().Err(err).Msg("listener: local users cannot be told apart (sock_diag unavailable): connections are capped per address")
			return
		}
		a.owners = o
	})
	if a.owners == nil {
		return source{ip: ip}
	}
	uid, err := a.owners.Owner(peer, local)
	switch {
	case err == nil:
		return source{local: true, uid: uid}
	case !errors.Is(err, identity.ErrSocketNotFound):
		a.log.Debug().Err(err).Str("peer_addr", peer.String()).Msg("listener: owner of a local peer's socket unknown; capped per address")
	}
	return source{ip: ip}
}

func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}

// fdOf is c's descriptor number (-1 when it has none).
func fdOf(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(p uintptr) { fd = int(p) })
	return fd
}

// turnAway closes a connection refused at accept, and counts and logs it
// (counted before it is closed: a peer that sees it closed sees it
// counted).
func (a *Admission) turnAway(c net.Conn, reason, src string, err error) {
	addr := c.RemoteAddr().String()
	logIt := a.count(reason)
	_ = c.Close()
	if logIt {
		a.logRefusal(reason, src, "", addr, "", "", err)
	}
}

// HandshakeFailed counts and logs a handshake that failed on a connection
// this Admission admitted (a listener that runs its own handshake: the
// relay's); one that ran out of time is ReasonHandshakeTimeout.
func (a *Admission) HandshakeFailed(c net.Conn, err error) {
	reason := ReasonHandshake
	if isTimeout(err) {
		reason = ReasonHandshakeTimeout
	}
	a.refuse(reason, "", "", c.RemoteAddr().String(), "", "", err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refuse counts a refusal and logs it while the log's bound allows.
func (a *Admission) refuse(reason, src, peerID, addr, target, typeName string, err error) {
	if a.count(reason) {
		a.logRefusal(reason, src, peerID, addr, target, typeName, err)
	}
}

// count counts a refusal and reports whether the log's bound lets it be
// logged.
func (a *Admission) count(reason string) bool {
	a.refused.add(reason)
	return a.lines.Allow()
}

func (a *Admission) logRefusal(reason, src, peerID, addr, target, typeName string, err error) {
	ev := a.log.Warn().Str("reason", reason).Str("peer_addr", addr)
	if src != "" {
		ev = ev.Str("source", src)
	}
	if peerID != "" {
		ev = ev.Str("peer", peerID)
	}
	if target != "" {
		ev = ev.Str("target", target)
	}
	if typeName != "" {
		ev = ev.Str("message_type", typeName)
	}
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Msg("remote refused")
}

// FlushLog logs how many refusals were left out of the log since its last
// report (a process that ends calls it, so no count is lost with it).
func (a *Admission) FlushLog() { a.lines.Flush() }

// Close stops the sweep of established connections (they stay open: their
// listener closes them) and releases the sock_diag socket.
func (a *Admission) Close() error {
	a.est.stop()
	var err error
	a.ownersOnce.Do(func() {}) // no lookup opens it after this
	if a.owners != nil {
		err = a.owners.Close()
	}
	return err
}
