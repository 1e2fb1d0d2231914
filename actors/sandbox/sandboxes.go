package sandbox

import (
	"fmt"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

// defaultArgv is the workload of a sandbox created without a command: it
// idles so that exec and connect have somewhere to go.
func defaultArgv() []string { return []string{"/bin/sh", "-c", "exec sleep infinity"} }

// Props returns the props of the sandboxes actor: it re-adopts every
// sandbox in the store when it starts and routes requests by name.
func Props(env *Env) *actor.Props {
	if env.Refusals == nil {
		env.Refusals = NewRefusalLog(env.Log)
	}
	strategy := supervise.OneForOne(10, 10*time.Second, supervise.RestartOnFailure,
		supervise.WithLogger(env.Log), supervise.WithCounters(env.Counters))
	return actor.PropsFromProducer(func() actor.Actor {
		return &sandboxesActor{env: env, kids: map[string]*actor.PID{}, status: map[string]*messages.SandboxStatus{}}
	}, actor.WithSupervisor(strategy), actor.WithReceiverMiddleware(supervise.PanicStack(env.Log)))
}

type sandboxesActor struct {
	env   *Env
	kids  map[string]*actor.PID
	names map[string]string // actor id -> sandbox name
	dying map[string]string // actor id -> name: said deleted, stopping
	// waiting are creates of a name whose deleted actor has not stopped
	// yet (its actor id is still taken): spawned at its Terminated.
	waiting map[string]*create
	// reown are sandboxes this node owns again whose old actor has not
	// stopped yet (cluster): spawned at its Terminated.
	reown  map[string]bool
	status map[string]*messages.SandboxStatus
	// creators are who created each sandbox this node drives, creates in
	// flight included (a client's quota counts them).
	creators map[string]string
}

func (a *sandboxesActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.names, a.dying, a.waiting, a.reown, a.creators = map[string]string{}, map[string]string{}, map[string]*create{}, map[string]bool{}, map[string]string{}
		if a.env.Cluster != nil {
			a.clusterStarted(ctx)
			return
		}
		lctx, cancel := bounded(storeTimeout)
		recs, err := a.env.Store.List(lctx)
		cancel()
		if err != nil {
			// Each is named in err; a refused one (store.ErrInvalid: a name
			// that is a path, ...) stays in the store, and nothing acts on it.
			a.env.Log.Error().Err(err).Msg("some sandbox records are unreadable or refused; they are left in the store as they are and no sandbox is driven from them")
		}
		for _, r := range recs {
			a.spawn(ctx, r.Spec.Name, nil)
			// Until the actor reports, list shows what the store says: a
			// sandbox is never missing from list after a gateway restart.
			a.status[r.Spec.Name] = recordStatus(r)
			a.creators[r.Spec.Name] = r.Spec.CreatedBy
		}
		a.env.Log.Info().Int("sandboxes", len(recs)).Msg("sandboxes re-adopted")
	case *messages.CreateRequest:
		if by, ok := a.allow(ctx); ok {
			a.create(ctx, m, by)
		}
	case *messages.SandboxRequest:
		a.route(ctx, m.Name)
	case *messages.RelayRequest:
		a.route(ctx, m.Name)
	case *messages.FaultRequest:
		a.route(ctx, m.Name)
	case *messages.PolicyRequest:
		a.route(ctx, m.Name)
	case *messages.LogsRequest:
		a.route(ctx, m.Name)
	case *messages.LogsAck:
		a.route(ctx, m.Name)
	case *Ownership:
		if a.env.Cluster != nil {
			a.ownership(ctx, m)
		}
	case *messages.Hello:
		if pid, ok := a.kids[m.Sandbox]; ok {
			ctx.Forward(pid)
			return
		}
		if a.env.Cluster != nil {
			a.routeCluster(ctx, m.Sandbox)
			return
		}
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_NOT_FOUND, Message: fmt.Sprintf("no sandbox named %s; exit", m.Sandbox)})
	case *messages.ListRequest:
		if _, ok := a.allow(ctx); !ok {
			return
		}
		reply := &messages.Reply{Status: messages.Status_STATUS_OK}
		if a.env.Cluster != nil {
			reply.Sandboxes = a.listCluster()
		} else {
			for _, st := range a.status {
				reply.Sandboxes = append(reply.Sandboxes, st)
			}
		}
		sort.Slice(reply.Sandboxes, func(i, j int) bool { return reply.Sandboxes[i].Name < reply.Sandboxes[j].Name })
		ctx.Respond(reply)
	case *statusUpdate:
		if _, ok := a.kids[m.status.Name]; ok {
			a.status[m.status.Name] = m.status
			a.creators[m.status.Name] = m.status.CreatedBy
		}
	case *deleted:
		a.forget(m.name, m.pid)
		a.dying[m.pid.Id] = m.name
		ctx.Send(m.pid, &forgotten{})
	case *actor.Terminated:
		if name, ok := a.dying[m.Who.Id]; ok {
			// Forgotten at its deleted notice; a create of the same name
			// (same actor id) may be waiting for the id to be free.
			delete(a.dying, m.Who.Id)
			if c := a.waiting[name]; c != nil {
				delete(a.waiting, name)
				a.spawn(ctx, name, c)
			} else if a.reown[name] {
				delete(a.reown, name)
				if a.env.Cluster.Owns(name) {
					a.own(ctx, name)
				}
			}
			return
		}
		if name, ok := a.names[m.Who.Id]; ok {
			a.forget(name, m.Who)
		}
	}
}

// recordStatus is a sandbox's status as its record has it (the sandbox
// actor adds what only it knows: workspace path, restart counters).
func recordStatus(r store.Record) *messages.SandboxStatus {
	s := r.Lifecycle
	st := &messages.SandboxStatus{Name: r.Spec.Name, Phase: s.Phase.String(), Reason: reasonText(s.Reason), Message: s.Message,
		SinceUnixMs: s.Since.UnixMilli(), RecoveryAttempts: int32(s.RecoveryAttempts), PolicyVersion: r.Spec.PolicyVersion,
		SupervisorPid: int32(r.SupervisorPID), WorkloadPid: int32(r.WorkloadPID), Uid: r.Spec.UID, CreatedBy: r.Spec.CreatedBy}
	if r.HostIDs != nil {
		st.HostIds = r.HostIDs.String()
	}
	if !s.NextRetry.IsZero() {
		st.NextRetryUnixMs = s.NextRetry.UnixMilli()
	}
	for _, t := range s.Transitions {
		st.Transitions = append(st.Transitions, &messages.Transition{From: t.From.String(), To: t.To.String(), Reason: reasonText(t.Reason), AtUnixMs: t.At.UnixMilli(), Message: t.Message, By: t.By})
	}
	return st
}

// forget drops a sandbox actor that stopped (or is stopping), unless the
// name already belongs to a newer one.
func (a *sandboxesActor) forget(name string, pid *actor.PID) {
	if k, ok := a.kids[name]; ok && k.Equal(pid) {
		delete(a.kids, name)
		delete(a.status, name)
		if a.waiting[name] == nil {
			delete(a.creators, name)
		}
	}
	delete(a.names, pid.Id)
}

func (a *sandboxesActor) route(ctx actor.Context, name string) {
	pid, ok := a.kids[name]
	if ok && a.env.Cluster != nil && a.lostTo(name) {
		// This node drove it and lost it (its lease lapsed while it was
		// paused or cut off) before the Disown or Fenced notice arrived:
		// answer as the cluster is, not as this actor last knew it.
		a.disown(ctx, name)
		ok = false
	}
	if !ok && a.env.Cluster != nil {
		a.routeCluster(ctx, name)
		return
	}
	if !ok {
		ctx.Respond(errdefs.Reply(errdefs.NotFound("no sandbox named %q (stockade sandbox list shows them)", name)))
		return
	}
	ctx.Forward(pid)
}

// create makes a new sandbox, created by by (its creator: an operator
// drives what it created).
func (a *sandboxesActor) create(ctx actor.Context, m *messages.CreateRequest, by Caller) {
	invalid := func(format string, args ...any) { ctx.Respond(errdefs.Reply(errdefs.Invalid(format, args...))) }
	if err := CheckName(m.Name); err != nil {
		invalid("%w", err)
		return
	}
	if _, ok := a.kids[m.Name]; ok || a.waiting[m.Name] != nil {
		phase := "?"
		if st := a.status[m.Name]; st != nil {
			phase = st.Phase
		}
		ctx.Respond(errdefs.Reply(errdefs.Refused("sandbox %s already exists (phase %s): delete it first, or pick another name", m.Name, phase)))
		return
	}
	pol, err := checkPolicy(m.PolicyFile, m.Policy)
	if err != nil {
		ctx.Respond(errdefs.Reply(err))
		return
	}
	asked := limitsOf(m.GetLimits())
	if err := checkLimits(asked); err != nil {
		ctx.Respond(errdefs.Reply(err))
		return
	}
	if !a.checkCreate(ctx, m, pol, asked, by) {
		return
	}
	if a.env.Cluster != nil && a.createCluster(ctx, m) {
		return
	}
	restart, err := lifecycle.ParseRestartPolicy(m.Restart)
	if m.Restart == "" {
		restart, err = lifecycle.RestartOnFailure, nil
	}
	if err != nil {
		invalid("%w", err)
		return
	}
	argv := m.Argv
	if len(argv) == 0 {
		argv = defaultArgv()
	}
	spec := store.Spec{Name: m.Name, UID: newUID(), Policy: string(m.Policy), PolicyVersion: 1, Workdir: m.Workdir,
		Argv: argv, Restart: restart, Created: time.Now(), Limits: asked.Or(a.env.limits()), CreatedBy: by.String(), PolicyBy: by.String()}
	c := &create{spec: spec, respondTo: ctx.Sender()}
	a.creators[m.Name] = spec.CreatedBy
	for _, name := range a.dying {
		if name == m.Name {
			a.waiting[m.Name] = c // its predecessor is stopping
			return
		}
	}
	a.spawn(ctx, m.Name, c)
}

func (a *sandboxesActor) spawn(ctx actor.Context, name string, c *create) {
	env := a.env
	props := actor.PropsFromProducer(func() actor.Actor {
		// A restarted sandbox actor reloads its record: the create happens once.
		init := c
		c = nil
		return &sandboxActor{env: env, name: name, init: init}
	}, actor.WithReceiverMiddleware(supervise.PanicStack(env.Log)),
		actor.WithSupervisor(supervise.OneForOne(0, 0, supervise.StopOnFailure, supervise.WithLogger(env.Log), supervise.WithCounters(env.Counters))))
	pid, err := ctx.SpawnNamed(props, "sandbox/"+name)
	if err != nil {
		if c != nil {
			ctx.Respond(errdefs.Reply(errdefs.Internal("spawn sandbox %s: %w", name, err)))
		}
		env.Log.Error().Err(err).Str("sandbox", name).Msg("spawn sandbox actor")
		return
	}
	// No Watch: a parent gets its child's Terminated anyway, and a second
	// one (from watching) for a deleted sandbox would arrive after its
	// successor of the same name (same pid) took its place, and drop it.
	a.kids[name] = pid
	a.names[pid.Id] = name
}
