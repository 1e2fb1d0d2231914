package boundary

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/chaos/fault"
)

// Messages of the proxy actor.
type (
	// accepted carries a new client connection to the proxy actor, with
	// the identity resolver's mark taken right after the accept.
	accepted struct {
		conn net.Conn
		mark identity.Mark
	}
	// acceptFailed ends the proxy actor: its supervisor restarts it.
	acceptFailed struct{ err error }
)

// proxyActor owns the accept loop of the HTTP proxy listener and hands
// each connection to a conn actor of its own: an idle one that served an
// earlier connection to its end, or a new one. Its supervisor strategy (set
// by the boundary) stops a failing conn actor and nothing else; a stopped
// conn actor is never handed another connection.
type proxyActor struct {
	b       *Boundary
	loop    *acceptLoop
	idle    *idleConns
	next    uint64 // connections accepted
	spawned uint64 // conn actors spawned (their N in conn/N)
}

func (a *proxyActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.idle = newIdleConns(maxIdleConns, &a.b.stats.IdleConns)
		if err := a.b.cfg.Injector.Inject(fault.ProxyListen); err != nil {
			panic(fmt.Errorf("proxy listener: %w", err))
		}
		send := sendTo(ctx.ActorSystem(), ctx.Self())
		a.loop = startAcceptLoop(a.b.cfg.Proxy,
			func(c net.Conn) { send(&accepted{conn: c, mark: a.b.mark()}) },
			func(err error) { send(&acceptFailed{err: err}) })
		a.b.cfg.Log.Debug().Str("addr", a.b.cfg.Proxy.Addr().String()).Msg("proxy accepting")
	case *accepted:
		if err := a.b.cfg.Injector.Inject(fault.ProxyListen); err != nil {
			_ = m.conn.Close()
			panic(fmt.Errorf("proxy listener: %w", err))
		}
		a.b.stats.Conns.Add(1)
		if a.b.live.len()+a.b.streams.len() >= a.b.cfg.MaxConns {
			a.b.overLimit(m.conn, proxy.WriteOverLimit)
			return
		}
		a.next++
		a.b.live.add(m.conn)
		job := &serveConn{conn: m.conn, id: a.next, mark: m.mark}
		if pid := a.idle.pop(); pid != nil {
			ctx.Send(pid, job)
			return
		}
		a.spawned++
		a.b.stats.ConnActors.Add(1)
		b, idle := a.b, a.idle
		pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &connActor{b: b, idle: idle} }, actor.WithDispatcher(a.b.pool)),
			"conn/"+strconv.FormatUint(a.spawned, 10))
		if err != nil {
			a.b.cfg.Log.Error().Err(err).Msg("spawn conn actor")
			a.b.live.remove(m.conn)
			_ = m.conn.Close()
			return
		}
		ctx.Send(pid, job)
	case *acceptFailed:
		panic(fmt.Errorf("proxy listener failed: %w", m.err))
	case *actor.Restarting, *actor.Stopping:
		if a.loop != nil {
			a.loop.stop()
			a.loop = nil
		}
		// The children stop with this actor: none may wait for work.
		if a.idle != nil {
			a.idle.close()
		}
		// Unblock the conn actors (in a bounded read or dial, or relaying a
		// tunnel on their worker) so they stop now: a restart stops the
		// children too, and waits for them.
		a.b.live.closeAll()
		a.b.upstreams.closeAll()
	}
}

// maxIdleConns bounds the conn actors kept waiting for a connection: one
// finishing while as many wait stops instead (a burst's actors do not all
// stay). An idle conn actor holds no goroutine, only its context and
// mailbox.
const maxIdleConns = 256

// idleConns is the stack of conn actors that served a connection to its end
// and wait for the next. The proxy actor pops, a conn actor pushes itself as
// the last thing it does for a connection; the most recently used comes
// first (its worker's stack and caches are the warmest). A conn actor that
// failed never pushes itself: its supervisor stops it.
type idleConns struct {
	mu     sync.Mutex
	pids   []*actor.PID
	max    int
	closed bool
	gauge  *atomic.Int64 // how many wait, for the metrics
}

func newIdleConns(max int, gauge *atomic.Int64) *idleConns {
	return &idleConns{max: max, gauge: gauge}
}

// pop takes the most recent idle conn actor, or nil when none waits.
func (s *idleConns) pop() *actor.PID {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pids)
	if n == 0 {
		return nil
	}
	pid := s.pids[n-1]
	s.pids[n-1] = nil
	s.pids = s.pids[:n-1]
	s.gauge.Add(-1)
	return pid
}

// push offers pid for the next connection; false when the stack is full or
// its proxy actor is stopping (the conn actor then stops).
func (s *idleConns) push(pid *actor.PID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.pids) >= s.max {
		return false
	}
	s.pids = append(s.pids, pid)
	s.gauge.Add(1)
	return true
}

// close refuses every later push and forgets the waiting actors (they stop
// with their parent).
func (s *idleConns) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.gauge.Add(-int64(len(s.pids)))
	s.pids = nil
}
