package sandbox

import (
	"net"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// faultTimeout bounds how long a fault request waits for the supervisor.
const faultTimeout = 5 * time.Second

// Callers, checked again in the handlers (defense in depth: the transport
// routes no remote peer to these actors but the ones named here): client
// verbs come from clients through api, and their roles must allow them
// (access.go); Hello from the supervisor of this sandbox through hello;
// heartbeats, exits and boundary failures from this sandbox's own session
// actor, inside the process.

func (a *sandboxActor) from(ctx actor.Context, role trust.Role, name string) bool {
	return allowed(ctx, a.env.Log, role, name)
}

// fromOwnSession: only a message sent inside this process (by the session
// actor, which checked the supervisor) is taken.
func (a *sandboxActor) fromOwnSession(ctx actor.Context) bool {
	if id, remote := transport.Peer(ctx); remote {
		transport.Refuse(ctx, a.env.Log, id)
		return false
	}
	return true
}

// allowed checks the caller of the current message (transport.Authorize).
func allowed(ctx actor.Context, log zerolog.Logger, role trust.Role, name string) bool {
	return transport.Authorize(ctx, log, role, name)
}

// supervisorID is the identity of this sandbox's supervisor: the only
// peer whose answers the sandbox's requests to it take (transport.NewFuture).
func (a *sandboxActor) supervisorID() trust.Identity {
	return trust.Identity{Role: trust.RoleSupervisor, Name: a.name}
}

// relayReply asks to (a supervisor) and answers the current requester with
// its Reply, or with an error naming what went wrong.
func (a *sandboxActor) relayReply(ctx actor.Context, to *actor.PID, msg proto.Message, timeout time.Duration) {
	requester := ctx.Sender()
	f := transport.Request(ctx, to, msg, timeout, a.supervisorID())
	ctx.ReenterAfter(f, func(res any, err error) {
		r, ok := res.(*messages.Reply)
		switch {
		case err == nil && ok:
			ctx.Send(requester, r)
		case err == nil:
			ctx.Send(requester, errdefs.Reply(errdefs.Internal("sandbox %s: the supervisor answered %T", a.name, res)))
		default:
			ctx.Send(requester, errdefs.Reply(errdefs.Internal("sandbox %s: the supervisor did not answer: %w", a.name, err)))
		}
	})
}

// helloAddressOK: the session actor a Hello names (where the gateway sends
// its commands) must be the supervisor's own: its "session" actor, on the
// host the Hello came from.
func (a *sandboxActor) helloAddressOK(ctx actor.Context, h *messages.Hello) bool {
	sup := h.GetSupervisor()
	host := transport.PeerHost(ctx)
	supHost, _, err := net.SplitHostPort(sup.GetAddress())
	if sup != nil && sup.Id == transport.SupervisorSession && (host == "" || (err == nil && supHost == host)) {
		return true
	}
	a.env.Log.Warn().Str("sandbox", a.name).Str("supervisor", sup.String()).Str("from_host", host).Msg("Hello refused: its session address is not the supervisor's")
	ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_UNAUTHENTICATED, Message: "the session address must be the supervisor's own session actor"})
	return false
}
