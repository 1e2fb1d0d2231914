package transport

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/trust"
)

// Forward sends the current message to to (the API or hello actor of the
// gateway node that owns the sandbox) on behalf of its caller: the sender
// (the caller's reply address) and the message header (the PeerHeader and
// PeerAddrHeader this endpoint stamped on receipt) travel along, so the
// owner's endpoint (ClusterRules) delivers it as the caller's, marked
// ViaHeader, and the owner answers the caller directly. A message from
// inside this process has no peer header: the owner sees this node as the
// caller.
//
// A node must not forward a message that was forwarded to it (Forwarded):
// the owner it names is this node's view of the cluster, and forwarding
// again could loop.
func Forward(ctx actor.Context, to *actor.PID) { ForwardFor(ctx, to, ctx.Sender()) }

// ForwardFor is Forward with another reply address: this node's own (a
// future), when it relays the owner's answer to the caller itself. The
// owner's endpoint accepts a reply address on the caller's host or on the
// forwarding node's.
func ForwardFor(ctx actor.Context, to, replyTo *actor.PID) { ctx.Send(to, Envelope(ctx, replyTo)) }

// Envelope is the current message as Forward sends it, with replyTo as
// its reply address: to send again later (sys.Root.Send) after the
// handler returned, with another reply address each time.
func Envelope(ctx actor.Context, replyTo *actor.PID) *actor.MessageEnvelope {
	var header map[string]string
	if h := ctx.MessageHeader(); h != nil {
		header = h.ToMap()
	}
	// protoactor's remote process unwraps the envelope (actor.UnwrapEnvelope)
	// and its endpoint writer sends Header and Sender with the message.
	return &actor.MessageEnvelope{Header: header, Message: ctx.Message(), Sender: replyTo}
}

// Forwarded reports whether the current message came through another
// gateway node (it carries ViaHeader), and that node's identity (zero if
// the header does not parse: ok is still true, so the message is not
// forwarded again).
func Forwarded(ctx actor.Context) (via trust.Identity, ok bool) {
	h := ctx.MessageHeader()
	if h == nil {
		return trust.Identity{}, false
	}
	v := h.Get(ViaHeader)
	if v == "" {
		return trust.Identity{}, false
	}
	via, _ = trust.ParseIdentity(v)
	return via, true
}
