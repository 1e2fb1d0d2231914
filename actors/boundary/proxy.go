package boundary

import (
	"fmt"
	"net"
	"strconv"

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

// proxyActor owns the accept loop of the HTTP proxy listener and spawns a
// conn actor per connection. Its supervisor strategy (set by the boundary)
// stops a failing conn actor and nothing else.
type proxyActor struct {
	b    *Boundary
	loop *acceptLoop
	next uint64
}

func (a *proxyActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
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
		c := &connActor{b: a.b, conn: m.conn, id: a.next, mark: m.mark}
		if _, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return c }, actor.WithDispatcher(a.b.pool)),
			"conn/"+strconv.FormatUint(a.next, 10)); err != nil {
			a.b.cfg.Log.Error().Err(err).Msg("spawn conn actor")
			_ = m.conn.Close()
		}
	case *acceptFailed:
		panic(fmt.Errorf("proxy listener failed: %w", m.err))
	case *actor.Restarting, *actor.Stopping:
		if a.loop != nil {
			a.loop.stop()
			a.loop = nil
		}
		// Unblock the conn actors (in a bounded read or dial, or relaying a
		// tunnel on their worker) so they stop now: a restart stops the
		// children too, and waits for them.
		a.b.live.closeAll()
		a.b.upstreams.closeAll()
	}
}
