package boundary

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

// step is where a connection actor is in its sequence. A failure is
// attributed to the step it happened in.
type step int

const (
	stepRead     step = 1
	stepIdentity step = 2
	stepDecide   step = 3
	stepDial     step = 4
	stepRelay    step = 5
)

func (s step) String() string {
	switch s {
	case stepRead:
		return "read"
	case stepIdentity:
		return "identity"
	case stepDecide:
		return "decide"
	case stepDial:
		return "dial"
	case stepRelay:
		return "relay"
	default:
		return "step(" + strconv.Itoa(int(s)) + ")"
	}
}

// Messages of a conn actor.
type (
	// serveConn hands a conn actor its next connection, with the identity
	// resolver's mark taken right after the accept.
	serveConn struct {
		conn net.Conn
		id   uint64
		mark identity.Mark
	}
	// relayDone is sent by a relay goroutine when its direction ends.
	relayDone struct{ err error }
)

// connActor mediates one proxy connection at a time. When a connection has
// ended (its answer given or its tunnel closed, nothing of it left running)
// the actor forgets it entirely and waits in its proxy actor's idle stack
// for the next one: a spawn and a stop per connection were a third of the
// actor runtime's cost per tunnel. A failure stops the actor (its
// supervisor's directive) with the connection it had, and a stopped actor
// is never handed another.
type connActor struct {
	b    *Boundary
	idle *idleActors[connActor]
	// job is the connection handed to this actor and not yet taken up. It
	// is set before the serveConn message is sent: protoactor drops the
	// user messages of an actor that stops, so a connection handed to an
	// actor stopped before it read it (its proxy actor restarting) is
	// ended by its Stopping instead of staying open and counted forever.
	job atomic.Pointer[serveConn]
	connState
}

// connState is everything a conn actor knows of its connection; it is
// zeroed when the connection ends, so nothing carries over to the next.
type connState struct {
	conn     net.Conn
	id       uint64
	mark     identity.Mark // the resolver's mark, taken right after the accept
	step     step
	req      *proxy.Request
	who      identity.Identity
	verdict  ConnectVerdict
	upstream net.Conn
	answered bool // the client got its answer (or its tunnel)
	relays   int  // relay goroutines still running
	endTold  bool // the resolver was told the connection ended
}

func (a *connActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *serveConn:
		if !a.job.CompareAndSwap(m, nil) {
			return // not (or no longer) this actor's
		}
		a.connState = connState{conn: m.conn, id: m.id, mark: m.mark}
		a.serve(ctx)
		// Not deferred: after a panic the supervisor stops this actor, whose
		// Stopping ends the connection.
		if a.relays == 0 {
			a.done(ctx)
		}
	case *relayDone:
		a.relays--
		if a.relays <= 0 {
			a.done(ctx)
		}
	case *actor.Stopping:
		if a.conn != nil {
			a.end()
		}
		if j := a.job.Swap(nil); j != nil {
			a.b.live.remove(j.conn)
			_ = j.conn.Close()
		}
	}
}

// done ends the connection and offers the actor for the next one, or stops
// it when enough others wait. The offer is the last thing done: from then
// on the accept loop may hand it the next connection.
func (a *connActor) done(ctx actor.Context) {
	a.end()
	a.connState = connState{}
	if !a.idle.push(idleActor[connActor]{pid: ctx.Self(), a: a}) {
		ctx.Stop(ctx.Self())
	}
}

// end answers a client left without one, closes both sockets and lets go
// of the connection's resources.
func (a *connActor) end() {
	a.cleanup()
	a.b.live.remove(a.conn)
	a.tellEnded()
	// With no relay goroutine left nothing reads the request (a tunnel's
	// client direction ran on this actor, now returned or failed): its
	// reader goes back to the boundary's Readers.
	if a.relays <= 0 {
		a.req.Release()
		a.req = nil
	}
}

// serve runs the connection's steps in order, in the actor: read the
// request (bounded by HeaderTimeout), identity, decision, dial (bounded by
// DialTimeout), answer, then hand the bytes to two relay goroutines. The
// blocking reads and the dial are bounded, and the proxy actor closes
// every live connection when it stops, so a stuck client never pins the
// actor past those bounds. Doing them inline (not in goroutines reporting
// back) saves two goroutines and two mailbox wake-ups per tunnel. The
// actor stops itself after serve unless relays are running.
func (a *connActor) serve(ctx actor.Context) {
	cfg := a.b.cfg
	a.step = stepRead
	if err := cfg.Injector.Inject(fault.ProxyAccept); err != nil {
		cfg.Log.Debug().Err(err).Uint64("conn", a.id).Msg("proxy accept fault: closing")
		a.answered = true
		return
	}
	// Identity at accept: who made the connection is read before its
	// request, and confirmed once the request is complete (bindIdentity).
	a.step = stepIdentity
	local, remote := addrPort(a.conn.LocalAddr()), addrPort(a.conn.RemoteAddr())
	who, panicked, idErr := a.identifyAtAccept(local, remote)
	a.who = who // so that its end is told (tellEnded) whatever follows
	a.step = stepRead
	_ = a.conn.SetReadDeadline(time.Now().Add(cfg.HeaderTimeout))
	req, err := a.b.readers.ReadRequest(a.conn)
	_ = a.conn.SetReadDeadline(time.Time{})
	if panicked != nil {
		// The lookup failed as a panic: the actor fails now, in its
		// identity step, with the request read (its client gets 403
		// identity_unavailable from cleanup, as any failed lookup's).
		a.req, a.step = req, stepIdentity
		panic(panicked)
	}
	if err != nil {
		a.answered = true
		var bad *proxy.BadRequestError
		if errors.As(err, &bad) {
			a.b.stats.Malformed.Add(1)
			a.writeBounded(func() error { return proxy.WriteBadRequest(a.conn, bad.Msg) })
		}
		cfg.Log.Debug().Err(err).Uint64("conn", a.id).Msg("proxy request not served")
		return
	}
	a.req = req

	a.step = stepIdentity
	if !a.bindIdentity(who, idErr) {
		return
	}

	a.step = stepDecide
	v := cfg.Decider.DecideConnect(context.Background(), ConnectQuery{
		Host: req.Host, Port: req.Port, Exe: who.Exe, Ancestors: who.Ancestors,
		IdentityNone: cfg.Identity.Mode() == identity.ModeNone,
	})
	a.verdict = v
	if !v.Allow {
		a.deny(v.Reason, v.Policy, v.PolicyName, v.Version, v.Message)
		return
	}
	// A socket several processes hold is allowed only if every holder is:
	// one binary must not borrow another's permission.
	for _, h := range who.Holders[min(1, len(who.Holders)):] {
		if h.Exe == who.Exe && slices.Equal(h.Ancestors, who.Ancestors) {
			continue
		}
		hv := cfg.Decider.DecideConnect(context.Background(), ConnectQuery{Host: req.Host, Port: req.Port, Exe: h.Exe, Ancestors: h.Ancestors})
		if !hv.Allow {
			a.deny(reason.BinaryNotAllowed, hv.Policy, hv.PolicyName, hv.Version,
				fmt.Sprintf("the socket is shared by %d processes and %s (pid %d) may not reach %s:%d: %s", len(who.Holders), h.Exe, h.Pid, req.Host, req.Port, hv.Message))
			return
		}
	}

	// The policy allows the binary: it must run only code the policy can
	// vouch for.
	if insp := a.b.inspector; insp != nil {
		t, err := insp.Tampered(who)
		switch {
		case err != nil:
			a.deny(reason.IdentityUnavailable, v.Policy, v.PolicyName, v.Version, fmt.Sprintf("peer identity unavailable: %v", err))
			return
		case t != nil:
			a.deny(reason.BinaryTampered, v.Policy, v.PolicyName, v.Version,
				fmt.Sprintf("%s (pid %d) may reach %s:%d, but it %s", t.Exe, t.Pid, req.Host, req.Port, t.Why))
			return
		}
	}

	a.step = stepDial
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout)
	up, blocked, err := proxy.DialChecked(dctx, &a.b.dialer, cfg.Resolver, req.Host, req.Port,
		proxy.DestRule{AllowedIPs: v.AllowedIPs, ExactHost: v.ExactHost, AllowLoopback: cfg.AllowLoopback, LoopbackFix: loopbackFix(cfg)})
	cancel()
	switch {
	case blocked != "":
		a.deny(reason.InternalAddressBlocked, v.Policy, v.PolicyName, v.Version, blocked)
		return
	case err != nil:
		a.record(true, reason.UpstreamUnreachable, v.Policy, v.PolicyName, v.Version, err.Error())
		a.answered = true
		a.writeBounded(func() error { return proxy.WriteBadGateway(a.conn, req.Host, req.Port, err.Error()) })
		return
	}
	a.upstream = up
	// Tracked until cleanup: the proxy actor, stopping, closes it (a relay
	// blocked on it ends), and its sweeps keep a long-lived one alive.
	a.b.upstreams.add(up)
	a.step = stepRelay
	a.record(true, reason.None, v.Policy, v.PolicyName, v.Version, v.Message)
	a.answered = true
	client := a.conn
	if req.Kind == proxy.KindConnect {
		if err := proxy.WriteEstablished(client); err != nil {
			return
		}
		a.tunnel(client, up, req)
		return
	}
	// A plain HTTP request: the answer may take long to come, and nothing
	// this actor could do unblocks a read of it but closing the upstream,
	// which its cleanup does.
	a.relays = 1
	send := sendTo(ctx.ActorSystem(), ctx.Self())
	go func() { send(&relayDone{err: req.Forward(client, up)}) }()
}

// identifyAtAccept looks the connection's client up before its request
// is read. A panic of the lookup is returned (with its stack), not
// raised: serve raises it once the request is read.
func (a *connActor) identifyAtAccept(local, remote netip.AddrPort) (who identity.Identity, panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Errorf("identity lookup at accept: %v\n%s", r, debug.Stack())
		}
	}()
	who, err = a.b.resolve(a.mark, local, remote)
	return who, nil, err
}

// bindIdentity settles the connection's identity once its request is
// complete: the one found at accept (who, or the lookup's error), still
// true now (identity.Rechecker). It answers the client and returns false
// when it is not: binary_changed for an identity that changed (the
// connection's process executed another program, exited, or another
// process took its socket), identity_unavailable for one that cannot be
// told.
func (a *connActor) bindIdentity(who identity.Identity, err error) bool {
	if err == nil && a.b.rechecker != nil {
		err = a.b.rechecker.Recheck(context.Background(), who)
	}
	if err == nil {
		a.who = who
		return true
	}
	// Declared here, not above: errors.As takes its address, which would
	// put it on the heap for every connection.
	var changed *identity.ChangedError
	if errors.As(err, &changed) {
		a.who = changed.Now
		a.deny(reason.BinaryChanged, "-", "", 0, changed.Msg)
	} else {
		a.deny(reason.IdentityUnavailable, "-", "", 0, fmt.Sprintf("peer identity unavailable: %v", err))
	}
	return false
}

// tunnel relays a CONNECT tunnel until both directions have ended: the
// client's bytes on this actor's own worker (its stack is grown already),
// the upstream's on one goroutine. The actor is busy meanwhile; the proxy
// actor, stopping, closes every client and upstream connection, which
// ends both directions (TestStopEndsHalfClosedTunnel).
func (a *connActor) tunnel(client, up net.Conn, req *proxy.Request) {
	back := make(chan struct{})
	a.b.pipes.Schedule(func() {
		defer close(back)
		_, _ = proxy.Pipe(client, up, nil)
	})
	_, _ = proxy.PipeFromClient(up, client, req.Reader)
	// The client has sent its last byte: most often it has closed its
	// socket, so its fd is likely the one its next connection gets. Say so
	// now, not when the tunnel has wound down (TestEndToldAtClientEOF): a
	// client's next connection often arrives before that.
	a.tellEnded()
	<-back
}

// tellEnded tells the resolver, once, that the client's connection has
// ended: its fd is likely the one its next connection gets (identity's
// guess.go).
func (a *connActor) tellEnded() {
	if a.endTold || a.b.ender == nil || a.who.Socket == 0 {
		return
	}
	a.endTold = true
	a.b.ender.Ended(a.who)
}

// deny answers 403 and records the denial.
func (a *connActor) deny(code reason.Code, policy, policyName string, version uint64, msg string) {
	a.record(false, code, policy, policyName, version, msg)
	a.answered = true
	host, port := "", 0
	if a.req != nil {
		host, port = a.req.Host, a.req.Port
	}
	a.writeBounded(func() error {
		return proxy.WriteDenied(a.conn, proxy.Denial{Reason: code, Policy: policy, PolicyName: policyName, Host: host, Port: port, Message: msg})
	})
}

// writeBounded writes an answer without letting a client that does not
// read hold the actor.
func (a *connActor) writeBounded(write func() error) {
	_ = a.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if err := write(); err != nil {
		a.b.cfg.Log.Debug().Err(err).Uint64("conn", a.id).Msg("answer not delivered")
	}
}

func (a *connActor) record(allowed bool, code reason.Code, policy, policyName string, version uint64, msg string) {
	if allowed && code != reason.UpstreamUnreachable {
		a.b.stats.Allowed.Add(1)
	} else if !allowed {
		a.b.stats.Denied.Add(1)
	}
	e := audit.NewDecision(audit.ClassNetwork, allowed, code)
	e.Sandbox = a.b.cfg.Sandbox
	e.Actor = &audit.Process{Path: a.who.Exe, Pid: a.who.Pid, Ancestors: a.who.Ancestors}
	for _, h := range a.who.Holders {
		e.Holders = append(e.Holders, audit.Process{Path: h.Exe, Pid: h.Pid, Ancestors: h.Ancestors})
	}
	if a.req != nil {
		e.Dst = &audit.Endpoint{Hostname: a.req.Host, Port: a.req.Port}
	}
	if ra := addrPort(a.conn.RemoteAddr()); ra.IsValid() {
		e.Src = &audit.Endpoint{IP: a.b.ipString(ra.Addr()), Port: int(ra.Port())}
	}
	e.Policy.Name, e.Policy.PolicyName, e.Policy.Version, e.Message = policy, policyName, version, msg
	if a.b.cfg.Identity.Mode() == identity.ModeNone {
		e.Unmapped = map[string]string{"identity": "none: endpoint-only matching, binaries ignored"}
	}
	a.b.cfg.Audit.Record(e)
}

// cleanup runs when the actor stops, normally or because it failed. A
// client that got no answer is answered here: a failure during the identity
// lookup is identity_unavailable, any other boundary_fault.
func (a *connActor) cleanup() {
	if !a.answered && a.req != nil {
		a.b.stats.Faults.Add(1)
		code := reason.BoundaryFault
		msg := fmt.Sprintf("the boundary failed during %s", a.step)
		if a.step == stepIdentity {
			code = reason.IdentityUnavailable
			msg = "peer identity lookup failed"
		}
		a.deny(code, "-", "", 0, msg)
	}
	_ = a.conn.Close()
	if a.upstream != nil {
		a.b.upstreams.remove(a.upstream)
		_ = a.upstream.Close()
	}
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap
	}
	return netip.AddrPort{}
}

// loopbackFix is how to allow a loopback upstream, said in the refusal: a
// sandbox's boundary takes the setting from the gateway that started it.
func loopbackFix(cfg *Config) string {
	if cfg.Sandbox == "" {
		return "" // the standalone boundary: its own --allow-loopback-upstream
	}
	return "start the gateway with `stockade gateway run --allow-loopback-upstream` to allow it; a sandbox started before gets it at its next start"
}
