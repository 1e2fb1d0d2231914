package boundary

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/dispatch"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/proxy"
)

// Stats are the boundary's running totals.
type Stats struct {
	Conns     atomic.Int64 // proxy connections accepted
	Queries   atomic.Int64 // DNS queries received
	Allowed   atomic.Int64 // decisions that allowed
	Denied    atomic.Int64 // decisions that denied (incl. identity failures)
	Malformed atomic.Int64 // malformed proxy requests and DNS packets
	Faults    atomic.Int64 // conn and query actors that failed
	// ConnActors counts the conn actors spawned: each serves one connection
	// at a time and, when one has ended, waits for the next (IdleConns).
	ConnActors atomic.Int64
	IdleConns  atomic.Int64 // conn actors waiting for a connection
	// QueryActors counts the query actors spawned: a batch actor answers
	// one UDP read at a time and then waits for the next; a TCP query and
	// a query a batch hands off get an actor each.
	QueryActors atomic.Int64
}

// Work is the connections and queries received: what the processor
// scaler (internal/procs, WithWork) compares across processor counts.
func (s *Stats) Work() uint64 { return uint64(s.Conns.Load() + s.Queries.Load()) }

// Boundary is a running boundary subtree.
type Boundary struct {
	sys   *actor.ActorSystem
	pid   *actor.PID
	cfg   *Config
	stats *Stats
	// live proxy connections and DNS-over-TCP streams, closed when their
	// listener actor stops (sockets outlive actors otherwise).
	live    *connSet
	streams *connSet
	// upstreams are the conn actors' upstream connections: a tunnel relays
	// on its actor's worker, so the proxy actor, stopping, closes these
	// too; its keep-alive sweeps turn keep-alive on for the long-lived ones.
	upstreams *connSet
	// inflight counts the query actors that have not ended.
	inflight atomic.Int64
	// pool runs the mailboxes of the leaves (conn/N, query/N) on warm
	// workers: no goroutine creation or stack growth per connection.
	pool *dispatch.Pool
	// pipes runs each tunnel's upstream-to-client relay on warm workers
	// too: a fresh goroutine per tunnel grew its stack through the splice
	// path almost every time (a tenth of a one-client tunnel's user time).
	pipes *dispatch.Pool
	// dialer dials upstreams, without keep-alive: the proxy actor's sweeps
	// turn it on for the tunnels that outlive a sweep (connSet).
	dialer net.Dialer
	// ender is cfg.Identity when it wants to hear of ended connections
	// (identity.Ender), else nil: asked once, not per connection.
	ender identity.Ender
	// marker is cfg.Identity when it can use the moment a connection was
	// accepted (identity.Marker), else nil.
	marker identity.Marker
	// rechecker and inspector are cfg.Identity when it can confirm at the
	// request's end the identity it gave at the accept
	// (identity.Rechecker), and judge whether its processes run code the
	// workload could have written (identity.Inspector); else nil.
	rechecker identity.Rechecker
	inspector identity.Inspector
	// readers lends the conn actors their request readers (1 KiB each,
	// the largest allocation of a tunnel); a conn actor gives its reader
	// back when it stops with no goroutine of its own still reading.
	readers proxy.Readers
	// lastIP is the text of the last client address an audit event named:
	// a sandbox's clients come from one or two addresses, so an event
	// reuses the string instead of formatting it again (ipText).
	lastIP atomic.Pointer[ipText]
}

// mark is the identity resolver's mark of this moment (the zero Mark when
// it takes none): the accept loop takes it right after each accept.
func (b *Boundary) mark() identity.Mark {
	if b.marker == nil {
		return identity.Mark{}
	}
	return b.marker.Mark()
}

// resolve identifies a connection's client, with the mark taken at its
// accept when the resolver takes marks.
func (b *Boundary) resolve(mark identity.Mark, local, remote netip.AddrPort) (identity.Identity, error) {
	if b.marker != nil {
		return b.marker.ResolveMarked(context.Background(), mark, local, remote)
	}
	return b.cfg.Identity.Resolve(context.Background(), local, remote)
}

// ipText is an address and its text form.
type ipText struct {
	addr netip.Addr
	text string
}

// ipString returns a.String(), reusing the last result for the same
// address.
func (b *Boundary) ipString(a netip.Addr) string {
	if last := b.lastIP.Load(); last != nil && last.addr == a {
		return last.text
	}
	t := &ipText{addr: a, text: a.String()}
	b.lastIP.Store(t)
	return t.text
}

// Start spawns the boundary actor (named "boundary") and its listener
// children on sys.
func Start(sys *actor.ActorSystem, cfg Config) (*Boundary, error) {
	if cfg.Decider == nil {
		return nil, errors.New("boundary: no policy decider configured")
	}
	if cfg.Proxy == nil && cfg.DNSPacket == nil && cfg.DNSStream == nil {
		return nil, errors.New("boundary: no listener configured (need a proxy or a DNS listener)")
	}
	cfg.defaults()
	b := &Boundary{sys: sys, cfg: &cfg, stats: &Stats{},
		live: newConnSet(), streams: newConnSet(), upstreams: newConnSet(),
		pool:   dispatch.NewPool(256, 10*time.Second, 300),
		pipes:  dispatch.NewPool(256, 10*time.Second, 0),
		dialer: net.Dialer{KeepAlive: -1}}
	b.ender, _ = cfg.Identity.(identity.Ender)
	b.marker, _ = cfg.Identity.(identity.Marker)
	b.rechecker, _ = cfg.Identity.(identity.Rechecker)
	b.inspector, _ = cfg.Identity.(identity.Inspector)
	strategy := supervise.OneForOne(10, 10*time.Second, supervise.RestartOnFailure,
		supervise.WithLogger(cfg.Log), supervise.WithCounters(cfg.Counters),
		supervise.WithOnGiveUp(func(child *actor.PID, reason any) {
			if cfg.OnGiveUp != nil {
				cfg.OnGiveUp(supervise.Kind(child), reason)
			}
		}))
	props := actor.PropsFromProducer(func() actor.Actor { return &boundaryActor{b: b} },
		actor.WithSupervisor(strategy),
		actor.WithReceiverMiddleware(supervise.PanicStack(cfg.Log)))
	pid, err := sys.Root.SpawnNamed(props, "boundary")
	if err != nil {
		return nil, fmt.Errorf("boundary: spawn: %w", err)
	}
	b.pid = pid
	return b, nil
}

// PID is the boundary actor.
func (b *Boundary) PID() *actor.PID { return b.pid }

// OpenConns returns the mediated connections open now (proxy clients and
// DNS-over-TCP streams), what Config.MaxConns caps.
func (b *Boundary) OpenConns() int { return b.live.len() + b.streams.len() }

// Stats returns the live totals.
func (b *Boundary) Stats() *Stats { return b.stats }

// Counters returns the directive counters of the subtree.
func (b *Boundary) Counters() *supervise.Counters { return b.cfg.Counters }

// Stop stops the subtree and waits for it (protoactor bounds the wait at
// 10 s). Listeners are not closed: they belong to whoever created them.
func (b *Boundary) Stop() error {
	defer b.pool.Close()
	defer b.pipes.Close()
	if err := b.sys.Root.StopFuture(b.pid).Wait(); err != nil {
		return fmt.Errorf("boundary: stop: %w", err)
	}
	return nil
}

// boundaryActor supervises the listener actors; it holds nothing mutable
// itself, so a restart of a child re-creates the child on the same sockets.
type boundaryActor struct{ b *Boundary }

func (a *boundaryActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		cfg := a.b.cfg
		leaf := supervise.OneForOne(0, 0, supervise.StopOnFailure,
			supervise.WithLogger(cfg.Log), supervise.WithCounters(cfg.Counters))
		mw := actor.WithReceiverMiddleware(supervise.PanicStack(cfg.Log))
		// The listener actors get a message per connection or read: their
		// mailbox runs on the warm workers too.
		pool := actor.WithDispatcher(a.b.pool)
		if cfg.Proxy != nil {
			ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &proxyActor{b: a.b} },
				actor.WithSupervisor(leaf), mw, pool), "proxy")
		}
		if cfg.DNSPacket != nil || cfg.DNSStream != nil {
			ans := &dnsproxy.Answerer{Decider: cfg.Decider, Upstream: cfg.DNSUpstream, Injector: cfg.Injector}
			ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &dnsActor{b: a.b, answerer: ans} },
				actor.WithSupervisor(leaf), mw, pool), "dns")
		}
	}
}
