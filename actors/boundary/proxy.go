package boundary

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/chaos/fault"
)

// Messages of the proxy actor.
type (
	// spawnFor asks the proxy actor for a new conn actor to serve job: no
	// idle one waited when the connection was accepted.
	spawnFor struct{ job *serveConn }
	// overLimit hands the proxy actor a connection over MaxConns, to be
	// refused (it may block for a bounded write; the accept loop must not).
	overLimit struct{ conn net.Conn }
	// listenFault makes the proxy actor fail with the injected fault of an
	// accepted connection (chaos): its supervisor restarts it.
	listenFault struct {
		conn net.Conn
		err  error
	}
	// acceptFailed ends the proxy actor: its supervisor restarts it.
	acceptFailed struct{ err error }
	// keepAliveSweep turns keep-alive on for the upstream connections
	// that lived through a sweep period (connSet.sweep), and schedules the
	// next sweep.
	keepAliveSweep struct{}
)

// proxyActor owns the accept loop of the HTTP proxy listener. The loop
// hands each connection to a conn actor of the proxy actor's: an idle one
// that served an earlier connection to its end, straight from the accept
// loop, or a new one the proxy actor spawns. Its supervisor strategy (set
// by the boundary) stops a failing conn actor and nothing else; a stopped
// conn actor is never handed another connection.
type proxyActor struct {
	b     *Boundary
	loop  *acceptLoop
	idle  *idleActors[connActor]
	sweep *time.Timer // the next keepAliveSweep
}

func (a *proxyActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.idle = newIdleActors[connActor](a.b.cfg.IdleConnActors, &a.b.stats.IdleConns)
		if err := a.b.cfg.Injector.Inject(fault.ProxyListen); err != nil {
			panic(fmt.Errorf("proxy listener: %w", err))
		}
		h := &handOff{b: a.b, idle: a.idle, sys: ctx.ActorSystem(), toProxy: sendTo(ctx.ActorSystem(), ctx.Self())}
		a.loop = startAcceptLoop(a.b.cfg.Proxy, h.accepted,
			func(err error) { h.toProxy(&acceptFailed{err: err}) })
		a.b.cfg.Log.Debug().Str("addr", a.b.cfg.Proxy.Addr().String()).Msg("proxy accepting")
		a.sweep = time.AfterFunc(a.b.cfg.KeepAliveSweep, func() { h.toProxy(&keepAliveSweep{}) })
	case *keepAliveSweep:
		for _, c := range a.b.upstreams.sweep() {
			_ = keepAlive(c)
		}
		if a.sweep != nil {
			a.sweep.Reset(a.b.cfg.KeepAliveSweep)
		}
	case *spawnFor:
		c := &connActor{b: a.b, idle: a.idle}
		c.job.Store(m.job)
		// conn/N: N counts the conn actors spawned, across restarts (only
		// this actor spawns them).
		pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return c }, actor.WithDispatcher(a.b.pool)),
			"conn/"+strconv.FormatInt(a.b.stats.ConnActors.Load()+1, 10))
		if err != nil {
			a.b.cfg.Log.Error().Err(err).Msg("spawn conn actor")
			a.b.live.remove(m.job.conn)
			_ = m.job.conn.Close()
			return
		}
		a.b.stats.ConnActors.Add(1)
		ctx.Send(pid, m.job)
	case *overLimit:
		a.b.overLimit(m.conn, proxy.WriteOverLimit)
	case *listenFault:
		_ = m.conn.Close()
		panic(fmt.Errorf("proxy listener: %w", m.err))
	case *acceptFailed:
		panic(fmt.Errorf("proxy listener failed: %w", m.err))
	case *actor.Restarting, *actor.Stopping:
		if a.sweep != nil {
			a.sweep.Stop()
			a.sweep = nil
		}
		// The loop first: once it has returned, every connection it handed
		// over is in live, and closed below.
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
		// children too, and waits for them. A connection handed to a conn
		// actor that stops before reading it is ended by that actor's
		// Stopping (connActor.job).
		a.b.live.closeAll()
		a.b.upstreams.closeAll()
	}
}

// handOff is what the accept loop of one proxy actor incarnation does with
// each connection, on the loop's goroutine: count it, take the identity
// resolver's mark, and give it to an idle conn actor directly (no message
// through the proxy actor: a mailbox run and a goroutine wake-up less per
// tunnel). The proxy actor gets it only to spawn a conn actor, to refuse it
// over the limit, or to fail with an injected fault.
type handOff struct {
	b       *Boundary
	idle    *idleActors[connActor]
	sys     *actor.ActorSystem // to send to an idle conn actor
	toProxy func(any)          // to send to the proxy actor
	next    uint64             // connections handed over; only the loop's goroutine counts
}

// accepted hands c over; false ends the accept loop: after an injected
// listener fault the proxy actor fails, and the connections that arrive
// meanwhile wait in the listener's backlog for its next incarnation.
func (h *handOff) accepted(c net.Conn) bool {
	b := h.b
	mark := b.mark()
	b.stats.Conns.Add(1)
	if err := injectOnLoop(b.cfg.Injector, fault.ProxyListen); err != nil {
		h.toProxy(&listenFault{conn: c, err: err})
		return false
	}
	if b.OpenConns() >= b.cfg.MaxConns {
		h.toProxy(&overLimit{conn: c})
		return true
	}
	h.next++
	b.live.add(c)
	job := &serveConn{conn: c, id: h.next, mark: mark}
	if w, ok := h.idle.pop(); ok {
		w.a.job.Store(job)
		h.sys.Root.Send(w.pid, job)
		return true
	}
	h.toProxy(&spawnFor{job: job})
	return true
}

// injectOnLoop runs a fault point on a goroutine of the boundary's own,
// outside any actor: an injected panic becomes the error the proxy actor
// then fails with (nothing would recover it there).
func injectOnLoop(inj fault.Injector, p fault.Point) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return inj.Inject(p)
}
