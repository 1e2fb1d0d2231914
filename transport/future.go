package transport

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/trust"
)

// replyPrefix starts the id of every reply address that crosses processes
// (NewFuture): "reply$" and replyIDLen lower-case hex digits, 128 random
// bits. protoactor's own futures ("future$" and a counter) are for replies
// inside a process only: no rule routes a remote peer to them.
const replyPrefix = "reply$"

// replyIDLen is the number of hex digits after replyPrefix.
const replyIDLen = 32

// NewFuture returns a future for a request that crosses processes and the
// reply address to send the request with (not f.PID(), which only this
// process can reach). The address's id is 128 random bits, so no peer can
// guess another request's; and the endpoint delivers to it only a reply
// from the identity the request went to (from: a supervisor's for its
// session, a gateway node's; a zero Name takes any identity of
// from.Role), refusing any other peer's (ReasonReplyFrom: refused,
// logged, counted, its stream closed). A reply from inside this process
// (a local dead letter's answer) is delivered. Timeouts and dead letters
// complete f as protoactor's own futures do.
func NewFuture(sys *actor.ActorSystem, timeout time.Duration, from trust.Identity) (f *actor.Future, replyTo *actor.PID) {
	f = actor.NewFuture(sys, timeout)
	b := &boundFuture{sys: sys, inner: f.PID(), from: from}
	// Held until the address and its timer are set: a reply that comes at
	// once waits for them in end.
	b.mu.Lock()
	defer b.mu.Unlock()
	var raw [replyIDLen / 2]byte
	for {
		_, _ = rand.Read(raw[:]) // crypto/rand.Read does not fail (Go 1.24)
		if pid, ok := sys.ProcessRegistry.Add(b, replyPrefix+hex.EncodeToString(raw[:])); ok {
			b.pid = pid
			break
		}
	}
	if timeout >= 0 {
		// f times out on its own; this unregisters the address.
		b.timer = time.AfterFunc(timeout, func() { b.end() })
	}
	return f, b.pid
}

// Request sends msg to `to` from ctx (an actor's context or a root
// context) with a NewFuture reply address that takes the answer only from
// `from`, and returns the future.
func Request(ctx actor.SenderContext, to *actor.PID, msg any, timeout time.Duration, from trust.Identity) *actor.Future {
	f, replyTo := NewFuture(ctx.ActorSystem(), timeout, from)
	ctx.RequestWithCustomSender(to, msg, replyTo)
	return f
}

// AnyGateway is the identity a request to a gateway node expects its
// answer from: any node (in a cluster, the node that owns a sandbox
// answers a request another node forwarded to it: ClusterRules).
func AnyGateway() trust.Identity { return trust.Identity{Role: trust.RoleGateway} }

// boundFuture is a reply address (NewFuture): it hands the first message
// it gets to protoactor's future and unregisters itself.
type boundFuture struct {
	sys   *actor.ActorSystem
	pid   *actor.PID // its own, registered under a random id
	inner *actor.PID // protoactor's future
	from  trust.Identity

	mu    sync.Mutex
	timer *time.Timer
	ended bool
}

var _ actor.Process = (*boundFuture)(nil)

// accepts reports whether a reply from id may complete the future.
func (b *boundFuture) accepts(id trust.Identity) bool {
	return id.Role == b.from.Role && (b.from.Name == "" || id.Name == b.from.Name)
}

// want names the identity a reply must come from.
func (b *boundFuture) want() string {
	if b.from.Name == "" {
		return string(b.from.Role) + ":*"
	}
	return b.from.String()
}

// end unregisters the reply address; it reports whether this call did.
func (b *boundFuture) end() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return false
	}
	b.ended = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.sys.ProcessRegistry.Remove(b.pid)
	return true
}

// SendUserMessage delivers the reply to protoactor's future, once. The
// endpoint's guard has refused a remote reply from another identity; one
// that came in past it is dropped here too.
func (b *boundFuture) SendUserMessage(_ *actor.PID, message any) {
	if h, _, _ := actor.UnwrapEnvelope(message); h != nil {
		if v := h.Get(PeerHeader); v != "" {
			id, err := trust.ParseIdentity(v)
			if err != nil || !b.accepts(id) {
				b.sys.Logger().Error("reply dropped: not from the identity its request went to",
					slog.String("reply_to", b.pid.Id), slog.String("from", v), slog.String("want", b.want()))
				return
			}
		}
	}
	if !b.end() {
		return // answered or timed out already
	}
	if p, ok := b.sys.ProcessRegistry.GetLocal(b.inner.Id); ok {
		p.SendUserMessage(b.inner, message)
	}
}

// SendSystemMessage completes the future as protoactor's own does.
func (b *boundFuture) SendSystemMessage(_ *actor.PID, message any) {
	if !b.end() {
		return
	}
	if p, ok := b.sys.ProcessRegistry.GetLocal(b.inner.Id); ok {
		p.SendSystemMessage(b.inner, message)
	}
}

// Stop unregisters the reply address and stops the future.
func (b *boundFuture) Stop(_ *actor.PID) {
	b.end()
	if p, ok := b.sys.ProcessRegistry.GetLocal(b.inner.Id); ok {
		p.Stop(b.inner)
	}
}

// replyFrom checks a remote reply to a reply address (a target with
// replyPrefix) from caller: "" when it may be delivered (from the identity
// the request went to, or to an address that is no longer registered: a
// late answer, which goes to dead letters as any other), else
// ReasonReplyFrom and why.
func (g *guard) replyFrom(target string, caller trust.Identity) (string, error) {
	p, ok := g.sys.ProcessRegistry.GetLocal(target)
	if !ok {
		return "", nil
	}
	b, ok := p.(*boundFuture)
	if !ok {
		return ReasonTarget, fmt.Errorf("%s is not a reply address", target)
	}
	if !b.accepts(caller) {
		return ReasonReplyFrom, fmt.Errorf("a reply to a request sent to %s", b.want())
	}
	return "", nil
}
