package sandbox

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// The sandboxes actor in a cluster (Env.Cluster set): it drives only the
// sandboxes its node owns (Ownership messages say which), and answers for
// the others from the cluster's view, forwarding to their owner node. A
// forwarded message keeps its original caller (transport.Forward) and is
// never forwarded again: a node whose view says "the owner is elsewhere"
// about a message that came from elsewhere answers "retry" instead of
// bouncing it.

// clusterStarted spawns the sandboxes this node already owns (claims made
// before this actor existed are not lost).
func (a *sandboxesActor) clusterStarted(ctx actor.Context) {
	owned := a.env.Cluster.Owned()
	for _, name := range owned {
		a.own(ctx, name)
	}
	a.env.Log.Info().Int("sandboxes", len(owned)).Str("node", a.env.Cluster.Self()).Msg("driving the sandboxes this node owns")
}

// ownership applies a change in what this node owns.
func (a *sandboxesActor) ownership(ctx actor.Context, m *Ownership) {
	switch m.Kind {
	case Own:
		if a.env.Cluster.Owns(m.Sandbox) {
			a.own(ctx, m.Sandbox)
		}
	case Disown:
		if !a.env.Cluster.Owns(m.Sandbox) {
			a.disown(ctx, m.Sandbox)
		}
	case Fenced:
		for name := range a.kids {
			if !a.env.Cluster.Owns(name) {
				a.disown(ctx, name)
			}
		}
	}
}

// own spawns the actor of a sandbox this node now owns (it adopts the
// supervisor, or starts one, from the record).
func (a *sandboxesActor) own(ctx actor.Context, name string) {
	if _, ok := a.kids[name]; ok || a.waiting[name] != nil {
		return
	}
	for _, n := range a.dying {
		if n == name {
			a.reown[name] = true // spawned when the old actor is gone
			return
		}
	}
	a.spawn(ctx, name, nil)
	if w := a.env.Cluster.Locate(name); w.Exists {
		a.status[name] = recordStatus(w.Record)
		a.creators[name] = w.Record.Spec.CreatedBy
	}
}

// disown stops the actor of a sandbox this node no longer owns. Its
// supervisor and workload keep running: the new owner adopts them. The
// actor stops at the forgotten notice, behind the requests already routed
// to it (stopping it at once would drop them, and their callers would
// wait out their timeouts); what it cannot do as a non-owner is refused
// by the store's fence and answered Unavailable.
func (a *sandboxesActor) disown(ctx actor.Context, name string) {
	pid, ok := a.kids[name]
	if !ok {
		return
	}
	a.env.Log.Warn().Str("sandbox", name).Msg("no longer owned by this node: its actor stops (the supervisor keeps running)")
	a.forget(name, pid)
	a.dying[pid.Id] = name
	ctx.Send(pid, &forgotten{})
}

// routeCluster answers a request for a sandbox this node does not drive:
// forwarded to its owner, or answered from the view.
func (a *sandboxesActor) routeCluster(ctx actor.Context, name string) {
	c := a.env.Cluster
	loc := c.Locate(name)
	_, hello := ctx.Message().(*messages.Hello)
	if loc.OwnerAPI != "" && loc.OwnerNode != c.Self() {
		if _, via := transport.Forwarded(ctx); !via {
			switch ctx.Message().(type) {
			case *messages.Hello, *messages.LogsRequest, *messages.LogsAck:
				// The owner answers directly: a supervisor's session, or a
				// stream's batches to the client's stream actor.
				target := transport.APIActor
				if hello {
					target = transport.HelloActor
				}
				transport.Forward(ctx, actor.NewPID(loc.OwnerAPI, target))
			default:
				a.relayToOwner(ctx, actor.NewPID(loc.OwnerAPI, transport.APIActor), loc.OwnerNode, name)
			}
			return
		}
	}
	if !loc.Exists {
		if hello {
			ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_NOT_FOUND, Message: fmt.Sprintf("no sandbox named %s; exit", name)})
			return
		}
		ctx.Respond(errdefs.Reply(errdefs.NotFound("no sandbox named %q (stockade sandbox list shows them)", name)))
		return
	}
	why := movingMessage(name, loc)
	if loc.OwnerNode == c.Self() {
		why = fmt.Sprintf("sandbox %s: this node (%s) owns it but cannot renew its cluster lease (is etcd reachable?): it drives and writes nothing until it can; nothing changed; retry", name, c.Self())
	}
	if hello {
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_UNAVAILABLE, Message: why})
		return
	}
	if req, ok := ctx.Message().(*messages.SandboxRequest); ok && req.Verb == messages.Verb_VERB_GET {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.viewStatus(loc)})
		return
	}
	r := errdefs.Reply(errdefs.Unavailable("%s", why))
	r.Sandbox = a.viewStatus(loc)
	ctx.Respond(r)
}

// viewStatus is locationStatus as this node may tell it: a view that still
// names this node as the owner while the node does not own the sandbox
// (it woke from a pause, its watch not caught up) names no owner.
func (a *sandboxesActor) viewStatus(loc Location) *messages.SandboxStatus {
	st := locationStatus(loc)
	if c := a.env.Cluster; st.Node == c.Self() && !c.Owns(loc.Record.Spec.Name) {
		st.Node = ""
	}
	return st
}

// lostTo reports whether another node owns a sandbox this node has an
// actor for (it does not own it now, and the view names another owner).
func (a *sandboxesActor) lostTo(name string) bool {
	c := a.env.Cluster
	if c.Owns(name) {
		return false
	}
	loc := c.Locate(name)
	return loc.OwnerNode != "" && loc.OwnerNode != c.Self()
}

// movingMessage says why a sandbox that exists has no owner to answer.
func movingMessage(name string, loc Location) string {
	switch {
	case !loc.HostAlive:
		return fmt.Sprintf("sandbox %s: no gateway node of its host %q is alive (NodeLost): its supervisor and workload keep running there, and a node of that host drives it again when one starts", name, loc.Record.Host)
	case loc.OwnerNode != "":
		return fmt.Sprintf("sandbox %s is changing owner (node %s); retry in a moment", name, loc.OwnerNode)
	default:
		return fmt.Sprintf("sandbox %s has no owner node right now (its node was lost; another node of host %q is taking it over); retry in a few seconds", name, loc.Record.Host)
	}
}

// locationStatus is the status of a sandbox driven elsewhere, from its
// record; one with no owner and no live node on its host shows as
// Error/NodeLost.
func locationStatus(loc Location) *messages.SandboxStatus {
	st := recordStatus(loc.Record)
	st.Node = loc.OwnerNode
	if loc.OwnerNode == "" && !loc.HostAlive {
		st.Phase, st.Reason = "Error", "NodeLost"
		st.Message = fmt.Sprintf("no gateway node of host %q is alive; the sandbox is driven again when one starts (its supervisor and workload keep running)", loc.Record.Host)
	}
	return st
}

// createCluster places a new sandbox: on this node, or forwarded to the
// node placement picks (a forwarded create is made here, whatever this
// node's view says, so it cannot bounce).
func (a *sandboxesActor) createCluster(ctx actor.Context, m *messages.CreateRequest) bool {
	c := a.env.Cluster
	if loc := c.Locate(m.Name); loc.Exists {
		ctx.Respond(errdefs.Reply(errdefs.Refused("sandbox %s already exists (phase %s, node %s): delete it first, or pick another name",
			m.Name, loc.Record.Lifecycle.Phase, orDash(loc.OwnerNode))))
		return true
	}
	if _, via := transport.Forwarded(ctx); via {
		return false
	}
	node, api := c.Place(m.Name)
	if node == c.Self() || api == "" {
		return false
	}
	a.relayToOwner(ctx, actor.NewPID(api, transport.APIActor), node, m.Name)
	return true
}

// relayTimeout bounds waiting for an owner node's answer. It is shorter
// than a client's own wait (30 s), so the client gets this node's clear
// answer, not a bare timeout.
const relayTimeout = 25 * time.Second

// relayRetry is how long a relayed request that is safe to repeat
// (idempotent) waits for its answer before it is sent again: an owner
// answers those in milliseconds, and an answer can be lost in transit
// when a node restarts on its address (protoactor drops what it queued
// for an address it cannot reach in time).
const relayRetry = 3 * time.Second

// relayAttempts bounds how often one idempotent request is sent.
const relayAttempts = 3

// ownerCheckEvery is how often a relay in flight looks whether the view
// still names the owner it went to.
const ownerCheckEvery = 250 * time.Millisecond

// idempotent reports whether a request may be relayed twice: reads, and a
// relay's one-time tokens (an unused pair expires).
func idempotent(msg any) bool {
	switch m := msg.(type) {
	case *messages.RelayRequest:
		return true
	case *messages.SandboxRequest:
		return m.Verb == messages.Verb_VERB_GET
	}
	return false
}

// relayToOwner forwards the current request (on its caller's behalf) to
// the API of the node that owns the sandbox, and relays that node's answer
// to the caller. When the owner's endpoint ends before it answers (it
// died mid-request), the caller is answered Unavailable at once, instead
// of waiting for a reply that will never come; so is it when the view
// stops naming that node as the owner. An idempotent request with no
// answer after relayRetry is sent again (the first answer wins).
func (a *sandboxesActor) relayToOwner(ctx actor.Context, api *actor.PID, owner, name string) {
	sys, caller := ctx.ActorSystem(), ctx.Sender()
	env, retry := transport.Envelope(ctx, nil), idempotent(ctx.Message())
	log := a.env.Log.With().Str("sandbox", name).Str("owner", owner).Str("request", fmt.Sprintf("%T", ctx.Message())).Logger()
	lost := make(chan struct{})
	unsub := transport.OnEndpointEnded(sys, api.Address, func() { close(lost) })
	type result struct {
		res any
		err error
	}
	answers := make(chan result, 4)
	send := func(wait time.Duration) {
		f, replyTo := transport.NewFuture(sys, wait, trust.Identity{Role: trust.RoleGateway, Name: owner})
		e := *env
		e.Sender = replyTo
		sys.Root.Send(api, &e)
		go func() { res, err := f.Result(); answers <- result{res, err} }()
	}
	start := time.Now()
	send(relayTimeout)
	// While the view names this owner, a change (it lost its lease, another
	// node took over) means its answer may never come: say so at once.
	c, watchOwner := a.env.Cluster, a.env.Cluster.Locate(name).OwnerNode == owner
	go func() {
		defer unsub()
		view := time.NewTicker(ownerCheckEvery)
		defer view.Stop()
		var again <-chan time.Time
		if retry {
			t := time.NewTicker(relayRetry)
			defer t.Stop()
			again = t.C
		}
		pending, sent := 1, 1
		var reply any
		for reply == nil {
			select {
			case r := <-answers:
				pending--
				if r.err == nil {
					reply = r.res
				} else if pending == 0 && (!retry || sent == relayAttempts || time.Since(start) >= relayTimeout-relayRetry) {
					reply = errdefs.Reply(errdefs.Unavailable("sandbox %s: its owner node %s did not answer (%w); the request may or may not have been carried out: check with get, then retry", name, owner, r.err))
				}
			case <-again:
				if left := relayTimeout - time.Since(start); left > time.Second && sent < relayAttempts {
					log.Warn().Int("attempt", sent+1).Msg("no answer yet from the owner node; asking again (the request is safe to repeat)")
					send(left)
					pending, sent = pending+1, sent+1
				}
			case <-lost:
				reply = errdefs.Reply(errdefs.Unavailable("sandbox %s: its owner node %s went away before it answered; the request may or may not have been carried out: check with get, then retry (another node takes the sandbox over within seconds)", name, owner))
			case <-view.C:
				if now := c.Locate(name).OwnerNode; watchOwner && now != owner {
					reply = errdefs.Reply(errdefs.Unavailable("sandbox %s: its owner changed from node %s to %s before it answered; the request may or may not have been carried out: check with get, then retry", name, owner, orDash(now)))
				}
			}
		}
		log.Debug().Int("attempts", sent).Dur("took", time.Since(start)).Msg("owner node's answer relayed")
		if caller != nil {
			sys.Root.Send(caller, reply)
		}
	}()
}

// listCluster is every sandbox of the cluster: this node's own from its
// actors, the others from the view.
func (a *sandboxesActor) listCluster() []*messages.SandboxStatus {
	seen := map[string]bool{}
	var out []*messages.SandboxStatus
	for _, loc := range a.env.Cluster.List() {
		name := loc.Record.Spec.Name
		seen[name] = true
		// This node's actor knows best, while the node owns the sandbox;
		// a node that lost it (paused, cut off) must not say it drives it.
		if st, ok := a.status[name]; ok && a.env.Cluster.Owns(name) {
			out = append(out, st)
			continue
		}
		out = append(out, a.viewStatus(loc))
	}
	for name, st := range a.status { // created here, not in the view yet
		if !seen[name] {
			if !a.env.Cluster.Owns(name) && st.Node != "" {
				st = proto.Clone(st).(*messages.SandboxStatus)
				st.Node = ""
			}
			out = append(out, st)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
