package supervisor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// Local messages of the session actor.
type (
	tick struct{}
	// helloDue: the wait before the next Hello is over.
	helloDue struct{}
	exited   struct{ msg *messages.WorkloadExited }
	helloRes struct {
		gen  uint64 // the Hello's number: an older one's answer is moot
		addr string // the gateway the Hello went to
		ack  *messages.HelloAck
		err  error
	}
	hbRes struct {
		to *actor.PID // the session the heartbeat went to
		ok bool
		// gone: the gateway answered that the session actor does not
		// exist (a dead letter): it was replaced or ended.
		gone bool
	}
	exitAcked struct{}
	// boundaryGaveUp: a boundary listener exhausted its restart budget.
	boundaryGaveUp struct{ detail string }
)

// session is the supervisor's end of the gateway session.
type session struct {
	log zerolog.Logger
	// gateways are the gateway nodes' API addresses (never empty); a Hello
	// goes to the hello actor of gateways[cur]. A node that does not answer
	// passes the turn to the next; a HelloAck's list replaces this one.
	gateways []string
	cur      int
	// unanswered counts the Hellos in a row that got no answer: after a
	// whole round of the list, the session backs off.
	unanswered int
	chaos      bool // FaultRequests are taken (the gateway runs --chaos)
	relayTLS   *tls.Config
	hello      *messages.Hello
	// gw is the session actor of the node that owns this sandbox, once a
	// Hello is accepted: not necessarily on the node the Hello went to (a
	// node forwards a Hello to the owner, which answers).
	gw        *actor.PID
	seq       uint64
	lastAck   time.Time
	pending   bool // a Hello or heartbeat request is in flight
	helloGen  uint64
	backoff   time.Duration
	nextHello time.Time
	helloWait scheduler.CancelFunc     // the timer of the next Hello, if one is set
	exit      *messages.WorkloadExited // to deliver before the supervisor ends
	restarts  func() map[string]int64
	resources func() *messages.Resources // nil: none reported
	faults    *fault.Set                 // armed by FaultRequest (tests, chaos)
	policy    *policy.Engine
	relays    relayServer // serves SSH on relay streams
	ctx       context.Context
	refused   func(reason string) // the gateway refused this instance: end the supervisor
	exitDone  func()              // the workload's exit was delivered
}

// The heartbeat period and the silence that ends a session are a
// contract with the gateway.
const (
	heartbeatEvery = contract.HeartbeatEvery
	lostAfter      = contract.SessionLostAfter
)

// Hello timing: a node that does not answer within helloTimeout passes
// the turn to the next node at once; after a whole round of the list
// without an answer the session waits (minBackoff, doubling up to
// maxBackoff). A node that answers UNAVAILABLE (the cluster has no owner
// for this sandbox yet: a failover is under way) is asked again after
// unavailableRetry.
const (
	helloTimeout     = 3 * time.Second
	minBackoff       = 200 * time.Millisecond
	maxBackoff       = 5 * time.Second
	unavailableRetry = 250 * time.Millisecond
)

func (s *session) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.backoff = minBackoff
		s.hello.Supervisor = ctx.Self()
		s.sayHello(ctx)
	case *actor.Stopping:
		if s.helloWait != nil {
			s.helloWait()
		}
	case *tick:
		s.onTick(ctx)
	case *helloDue:
		if !s.pending && s.gw == nil && !time.Now().Before(s.nextHello) {
			s.sayHello(ctx)
		}
	case *helloRes:
		if m.gen == s.helloGen {
			s.onHelloRes(ctx, m)
		}
	case *messages.Reconnect:
		if !s.fromGateway(ctx) || m.Gateway == "" {
			return
		}
		// A node took this sandbox over: Hello to it now, whatever is in
		// flight (a heartbeat to a dead owner would take lostAfter to fail).
		if i := slices.Index(s.gateways, m.Gateway); i >= 0 {
			s.cur = i
		} else {
			s.gateways = append(s.gateways, m.Gateway)
			s.cur = len(s.gateways) - 1
		}
		s.log.Info().Str("gateway", m.Gateway).Msg("asked to reconnect by the sandbox's owner node")
		s.gw, s.unanswered = nil, 0
		s.sayHello(ctx)
	case *hbRes:
		if s.gw == nil || !m.to.Equal(s.gw) {
			// A heartbeat of a session given up since (Reconnect): its
			// answer says nothing of the current one (a dead letter from
			// the old owner must not end the new session).
			return
		}
		s.pending = false
		if m.ok {
			s.lastAck = time.Now()
		}
		if m.gone {
			// No need to wait out lostAfter: the session is gone for sure.
			s.log.Warn().Str("session", s.gw.GetId()).Msg("the gateway has no such session; saying Hello again")
			s.gw = nil
			s.sayHello(ctx)
		}
	case *exited:
		s.exit = m.msg
		if s.gw != nil {
			s.sendExit(ctx)
		}
	case *messages.FaultRequest:
		if !s.fromGateway(ctx) || !s.forMe(ctx, m.Name, "") {
			return
		}
		if !s.chaos {
			ctx.Respond(errdefs.Reply(errdefs.Invalid("faults are off: the gateway runs without --chaos")))
			return
		}
		fired, err := s.faults.Apply(m.Rule)
		if err != nil {
			ctx.Respond(errdefs.Reply(errdefs.Invalid("%w", err)))
			return
		}
		s.log.Warn().Str("rule", m.Rule).Int("fired_before", fired).Msg("fault armed by request")
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Message: "armed " + m.Rule, Fired: int64(fired)})
	case *messages.SetPolicy:
		if !s.fromGateway(ctx) || !s.forMe(ctx, m.Sandbox, m.Instance) {
			return
		}
		v, err := s.policy.LoadVersion("policy.yaml", m.Policy, m.Version)
		switch {
		case err != nil && s.policy.Version() >= m.Version:
			// Already at (or past) this version: a repeated push.
			v = s.policy.Version()
		case err != nil:
			s.log.Error().Err(err).Uint64("version", m.Version).Msg("policy from the gateway refused; the current version stays")
			if ctx.Sender() != nil {
				r := errdefs.Reply(errdefs.Invalid("%w", err))
				r.PolicyVersion = s.policy.Version()
				ctx.Respond(r)
			}
			return
		}
		s.hello.PolicyVersion = v // a later Hello tells the gateway what runs
		if ctx.Sender() != nil {
			ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Message: fmt.Sprintf("policy version %d live", v), PolicyVersion: v})
		}
	case *boundaryGaveUp:
		s.log.Error().Str("detail", m.detail).Msg("boundary failed past its restart budget; telling the gateway")
		if s.gw != nil {
			ctx.Send(s.gw, &messages.BoundaryFailed{Sandbox: s.hello.Sandbox, Instance: s.hello.Instance, Detail: m.detail})
		}
	case *messages.OpenRelay:
		if s.fromGateway(ctx) {
			go s.serveRelay(m)
		}
	case *exitAcked:
		if s.exit != nil {
			s.exit = nil
			s.exitDone()
		}
	}
}

func (s *session) onHelloRes(ctx actor.Context, m *helloRes) {
	s.pending = false
	if m.err != nil {
		// No answer: this node may be dead; the next one is asked at once,
		// and the session waits only after a whole round went unanswered.
		s.unanswered++
		s.cur = (s.cur + 1) % len(s.gateways)
		if s.unanswered < len(s.gateways) {
			s.log.Warn().Err(m.err).Str("gateway", m.addr).Str("next", s.gateways[s.cur]).Msg("gateway did not answer Hello; trying the next")
			s.sayHello(ctx)
			return
		}
		s.unanswered = 0
		s.log.Warn().Err(m.err).Str("gateway", m.addr).Strs("gateways", s.gateways).Dur("retry_in", s.backoff).Msg("no gateway answered Hello")
		s.retryLater(ctx)
		return
	}
	s.unanswered = 0
	switch m.ack.Status {
	case messages.Status_STATUS_OK:
		s.gw, s.lastAck, s.backoff = m.ack.Session, time.Now(), minBackoff
		s.useGateways(m.addr, m.ack.Gateways)
		s.log.Info().Str("gateway", m.addr).Str("session", m.ack.Session.GetId()).Str("session_node", m.ack.Session.GetAddress()).
			Str("endpoint", ctx.Self().Address).Msg("session up")
		if s.exit != nil {
			s.sendExit(ctx)
		}
	case messages.Status_STATUS_REFUSED, messages.Status_STATUS_NOT_FOUND:
		s.refused(m.ack.Message)
	case messages.Status_STATUS_UNAVAILABLE:
		// The cluster has no owner for this sandbox yet (a failover is under
		// way): the same node, soon, without growing the backoff.
		s.log.Info().Str("gateway", m.addr).Str("message", m.ack.Message).Dur("retry_in", unavailableRetry).Msg("Hello: no owner yet")
		s.helloIn(ctx, unavailableRetry)
	default:
		s.log.Warn().Str("gateway", m.addr).Str("status", m.ack.Status.String()).Str("message", m.ack.Message).Dur("retry_in", s.backoff).Msg("Hello not accepted")
		s.retryLater(ctx)
	}
}

// retryLater says Hello again after the backoff, and doubles it.
func (s *session) retryLater(ctx actor.Context) {
	s.helloIn(ctx, s.backoff)
	s.backoff = min(2*s.backoff, maxBackoff)
}

// helloIn says Hello again after d (the tick is the fallback).
func (s *session) helloIn(ctx actor.Context, d time.Duration) {
	s.nextHello = time.Now().Add(d)
	if s.helloWait != nil {
		s.helloWait()
	}
	s.helloWait = scheduler.NewTimerScheduler(ctx.ActorSystem().Root).SendOnce(d, ctx.Self(), &helloDue{})
}

// useGateways replaces the list of gateways with the cluster's (when it
// names any), keeping the turn at the node that answered if it is listed.
func (s *session) useGateways(answered string, list []string) {
	list = gatewayList(list)
	if len(list) == 0 || slices.Equal(list, s.gateways) {
		return
	}
	s.gateways, s.cur = list, max(slices.Index(list, answered), 0)
	s.log.Info().Strs("gateways", list).Msg("gateway list from the cluster")
}

// gatewayList is addrs without empty and repeated entries.
func gatewayList(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (s *session) onTick(ctx actor.Context) {
	if err := s.faults.Inject(fault.SessionSilence); err != nil {
		// An injected session cut: this tick says nothing. The gateway
		// notices after three silent ticks, like a real network cut.
		s.log.Warn().Err(err).Msg("session tick skipped (injected silence)")
		return
	}
	if s.pending {
		return
	}
	if s.gw == nil {
		if time.Now().After(s.nextHello) {
			s.sayHello(ctx)
		}
		return
	}
	if time.Since(s.lastAck) > lostAfter {
		s.log.Warn().Dur("silent_for", time.Since(s.lastAck)).Msg("session lost; saying Hello again")
		s.gw = nil
		s.sayHello(ctx)
		return
	}
	if s.exit != nil {
		s.sendExit(ctx) // until acknowledged
		return
	}
	s.seq++
	hb := &messages.Heartbeat{Sandbox: s.hello.Sandbox, Instance: s.hello.Instance, Seq: s.seq,
		WorkloadPid: s.hello.WorkloadPid, Restarts: s.restarts()}
	if s.resources != nil {
		hb.Resources = s.resources()
	}
	s.pending = true
	to := s.gw
	f := transport.Request(ctx, to, hb, lostAfter, transport.AnyGateway())
	ctx.ReenterAfter(f, func(res any, err error) {
		_, ok := res.(*messages.HeartbeatAck)
		ctx.Send(ctx.Self(), &hbRes{to: to, ok: err == nil && ok, gone: errors.Is(err, actor.ErrDeadLetter)})
	})
}

// sayHello says Hello to the hello actor of the current gateway.
func (s *session) sayHello(ctx actor.Context) {
	s.pending = true
	s.helloGen++
	gen := s.helloGen
	addr := s.gateways[s.cur]
	s.log.Debug().Str("gateway", addr).Msg("saying Hello")
	f := transport.Request(ctx, actor.NewPID(addr, transport.HelloActor), s.hello, helloTimeout, transport.AnyGateway())
	ctx.ReenterAfter(f, func(res any, err error) {
		ack, ok := res.(*messages.HelloAck)
		if err == nil && !ok {
			err = errUnexpected
		}
		ctx.Send(ctx.Self(), &helloRes{gen: gen, addr: addr, ack: ack, err: err})
	})
}

func (s *session) sendExit(ctx actor.Context) {
	f := transport.Request(ctx, s.gw, s.exit, 3*time.Second, transport.AnyGateway())
	ctx.ReenterAfter(f, func(res any, err error) {
		if _, ok := res.(*messages.HeartbeatAck); ok && err == nil {
			ctx.Send(ctx.Self(), &exitAcked{})
		}
		// else: the next Hello re-sends it
	})
}

// relayServer serves one SSH connection on a relay stream.
type relayServer interface {
	ServeConn(ctx context.Context, c net.Conn) error
}

// serveRelay dials the gateway's relay listener, presents the token and
// serves SSH on the stream until it ends. A failure ends this relay only.
func (s *session) serveRelay(m *messages.OpenRelay) {
	if s.relays == nil {
		s.log.Error().Msg("relay requested but this supervisor has no SSH server")
		return
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: s.relayTLS}
	c, err := d.Dial("tcp", m.Addr)
	if err != nil {
		s.log.Warn().Err(err).Str("relay", m.Addr).Msg("relay dial-back failed")
		return
	}
	defer c.Close()
	if err := relay.Open(c, m.Token); err != nil {
		s.log.Warn().Err(err).Msg("relay dial-back failed")
		return
	}
	if err := s.relays.ServeConn(s.ctx, c); err != nil {
		s.log.Debug().Err(err).Msg("relay stream ended")
	}
}

// fromGateway: the session takes commands only from a gateway node (the
// transport admits no one else; checked again here).
func (s *session) fromGateway(ctx actor.Context) bool {
	return transport.Authorize(ctx, s.log, trust.RoleGateway, "")
}

// forMe: a command names this sandbox (and instance, when given); a
// command for another is refused (the gateway sends to the session
// address a Hello named).
func (s *session) forMe(ctx actor.Context, sandbox, instance string) bool {
	if sandbox == s.hello.Sandbox && (instance == "" || instance == s.hello.Instance) {
		return true
	}
	s.log.Warn().Str("for", sandbox+"/"+instance).Msg("command for another sandbox or instance refused")
	if ctx.Sender() != nil {
		ctx.Respond(errdefs.Reply(errdefs.Invalid("this is the supervisor of %s/%s, not %s/%s", s.hello.Sandbox, s.hello.Instance, sandbox, instance)))
	}
	return false
}
