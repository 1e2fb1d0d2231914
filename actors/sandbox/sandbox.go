package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy/reason"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// sandboxActor is sandbox/NAME. Its state is the store record; after a
// restart it reloads it and adopts the supervisor if it still runs. It
// reaches the node only through its seams (seams.go): nothing in Receive
// blocks without a deadline, and slow work (stops, waits, removing files)
// runs off the actor and reports back as a message (messages.go).
type sandboxActor struct {
	env  *Env
	name string
	// init is set for a create; nil for a restore.
	init *create

	m   *lifecycle.Machine
	rec store.Record
	// sup is the current instance's supervisor; dying one being killed
	// (it is replaced); spawnAfter the one a spawn waits to be gone.
	sup, dying, spawnAfter driver.Proc
	// stopping are the supervisors the current stop action is stopping.
	stopping []driver.Proc
	// actionSeq numbers stop and delete actions: a report of an older
	// one is stale.
	actionSeq   uint64
	session     *actor.PID // the session child of the current instance
	sessionAt   time.Time  // when it was made
	hbRestarts  map[string]int64
	resources   *messages.Resources // as the supervisor last reported
	sessions    int                 // session children spawned (names session/N)
	sessionSeen bool                // the current instance said Hello at least once
	supRemote   *actor.PID          // the supervisor's session actor (current instance)
	hostKey     string              // the sandbox's SSH host key
	// children counts the directives applied to this sandbox's session
	// and relay actors (kept across their replacements).
	children    *supervise.Counters
	stopTimer   func() bool
	unwatch     chan struct{} // closed when this instance stops watching its supervisors
	gone        bool          // deleted: answering NotFound until forgotten
	recordRetry time.Duration // backoff of a failed record delete
	audit       *audit.File
	// logStreams are the clients of this sandbox's logs streams, by
	// child id (logs.go: a client's streams are capped).
	logStreams map[string]streamHolder
}

func (a *sandboxActor) Receive(ctx actor.Context) {
	if a.gone {
		a.afterDelete(ctx)
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.children = supervise.NewCounters()
		a.start(ctx)
	case *forgotten:
		ctx.Stop(ctx.Self()) // disowned: the requests queued before are answered
	case *messages.SandboxRequest:
		if by, ok := a.allow(ctx); ok {
			a.verb(ctx, m, by.String())
		}
	case *messages.Hello:
		if a.from(ctx, trust.RoleSupervisor, a.name) && a.helloAddressOK(ctx, m) {
			a.hello(ctx, m)
		}
	case *messages.RelayRequest:
		if _, ok := a.allow(ctx); ok {
			a.openRelay(ctx)
		}
	case *messages.PolicyRequest:
		if by, ok := a.allow(ctx); ok {
			a.policyRequest(ctx, m, by)
		}
	case *messages.LogsRequest, *messages.LogsAck:
		if by, ok := a.allow(ctx); ok {
			a.logs(ctx, by) // logs.go
		}
	case *messages.FaultRequest:
		if _, ok := a.allow(ctx); !ok {
			return
		}
		if a.supRemote == nil {
			ctx.Respond(errdefs.Reply(errdefs.Unavailable("sandbox %s has no supervisor session", a.name)))
			return
		}
		// Asked here and answered from here: a client talks to the gateway
		// only, never to a supervisor.
		a.relayReply(ctx, a.supRemote, m, faultTimeout)
	case *messages.WorkloadExited:
		if !a.fromOwnSession(ctx) {
			return
		}
		if m.Instance == a.rec.InstanceID {
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.WorkloadExited{Code: int(m.Code), Detail: m.Detail}, a.supervisor())
			})
		}
	case *messages.BoundaryFailed:
		if !a.fromOwnSession(ctx) {
			return
		}
		if m.Instance == a.rec.InstanceID {
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.BoundaryFailed{Detail: m.Detail}, a.supervisor())
			})
		}
	case *messages.Heartbeat:
		if !a.fromOwnSession(ctx) {
			return
		}
		a.hbRestarts, a.resources = m.Restarts, m.Resources
		if m.WorkloadPid != 0 && int(m.WorkloadPid) != a.rec.WorkloadPID {
			a.rec.WorkloadPID = int(m.WorkloadPid)
			a.persist(ctx)
		}
	case *timerFired:
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.TimerFired{Seq: m.seq}, a.self()) })
	case *supervisorExited:
		a.supervisorExited(ctx, m)
	case *previousStopped:
		a.previousStopped(ctx, m)
	case *actionDone:
		a.afterAction(ctx, m)
	case *retryRecordDelete:
		if a.m.Phase() == lifecycle.PhaseDeleting {
			a.deleteRecord(ctx)
		}
	case *actor.Terminated:
		if a.session != nil && m.Who.Equal(a.session) {
			a.session = nil
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.SessionLost{Detail: "no heartbeat from the supervisor"}, a.self())
			})
		}
	case *actor.Restarting:
		// The session child is stopped with this instance: no loss to record.
		a.session = nil
		a.cancelTimer()
		a.stopWatching()
	case *actor.Stopping:
		// The gateway (or a delete) stops this actor: its session child is
		// stopped with it, and its Terminated, delivered after this, is no
		// session loss (recording one would persist a false Error/SessionLost
		// at every gateway shutdown, with its audit file already closed).
		a.session = nil
		a.cancelTimer()
		a.stopWatching()
		if a.audit != nil {
			_ = a.audit.Close()
		}
	}
}

func (a *sandboxActor) start(ctx actor.Context) {
	if a.init != nil {
		a.rec = store.Record{Spec: a.init.spec, Intent: store.IntentRunning}
		a.openAudit()
		a.m = lifecycle.New(a.lifecycleConfig(), lifecycle.WithClock(a.env.Clock))
		t, err := a.m.Apply(lifecycle.VerbCreate, orSelf(a.init.spec.CreatedBy, a.self()))
		if err == nil {
			err = a.createWorkspace()
		}
		if err == nil {
			_, err = a.assignIDs(&a.rec, true)
		}
		if err == nil {
			err = a.persistErr()
		}
		if err != nil {
			a.releaseIDs()
			ctx.Send(a.init.respondTo, errdefs.Reply(err))
			a.vanish(ctx)
			return
		}
		// Acknowledged only now: the record is on disk.
		ctx.Send(a.init.respondTo, &messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.status()})
		a.carryOut(ctx, t)
		return
	}
	if c := a.env.Cluster; c != nil && !c.Owns(a.name) {
		// Another node owns it now (this actor restarted after a refused
		// write, or was spawned just before a loss): leave it alone.
		a.env.Log.Warn().Str("sandbox", a.name).Str("node", c.Self()).Msg("not owned by this node; its actor stops without touching the supervisor")
		ctx.Stop(ctx.Self())
		return
	}
	sctx, cancel := bounded(storeTimeout)
	rec, err := a.env.Store.Get(sctx, a.name)
	cancel()
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("sandbox record unreadable; actor stops")
		a.vanish(ctx)
		return
	}
	a.rec = rec
	a.openAudit()
	a.registerIDs()
	alive := false
	if rec.SupervisorPID > 0 {
		actx, cancel := bounded(startTimeout)
		p, err := a.env.Driver.Adopt(actx, a.name, rec.SupervisorPID)
		cancel()
		if alive = err == nil; alive {
			a.sup = p
			a.watch(ctx, p, rec.InstanceID)
		}
	}
	m, t, err := lifecycle.Restore(rec.Lifecycle, a.lifecycleConfig(), alive, a.self(), lifecycle.WithClock(a.env.Clock))
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("restore lifecycle")
		a.vanish(ctx)
		return
	}
	a.m = m
	a.env.Log.Info().Str("sandbox", a.name).Bool("supervisor_alive", alive).Int("supervisor_pid", rec.SupervisorPID).
		Str("phase", m.Phase().String()).Msg("sandbox re-adopted")
	if alive && rec.SupervisorAddr != "" && a.env.Gateway != "" {
		// Its session may still be with the old node (gone, or this
		// gateway's previous run): say Hello here now.
		ctx.Send(actor.NewPID(rec.SupervisorAddr, contract.SupervisorSession), &messages.Reconnect{Gateway: a.env.Gateway})
	}
	a.finish(ctx, t)
}

// createWorkspace makes the workspace at create, so that the host can put
// files in before the sandbox is Ready.
func (a *sandboxActor) createWorkspace() error {
	ws := a.env.Driver.Workspace(a.name)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return errdefs.Internal("create workspace %s: %w", ws, err)
	}
	return nil
}

// openAudit opens the lifecycle audit of this creation (a.rec is set).
func (a *sandboxActor) openAudit() {
	af, err := a.env.openLifecycleAudit(a.name, a.rec.Spec.UID)
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("lifecycle audit unavailable")
	}
	a.audit = af
}

func (a *sandboxActor) lifecycleConfig() lifecycle.Config {
	c := a.env.Lifecycle
	c.Restart = a.rec.Spec.Restart
	if a.env.Cluster != nil {
		c.Adoption = "takeover by node " + a.env.Cluster.Self()
	}
	return c
}

// verb applies a client verb, asked for by by: one machine step,
// persisted before the reply.
func (a *sandboxActor) verb(ctx actor.Context, req *messages.SandboxRequest, by string) {
	if req.Verb == messages.Verb_VERB_GET {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.status()})
		return
	}
	v, ok := verbOf(req.Verb)
	if !ok {
		ctx.Respond(errdefs.Reply(errdefs.Invalid("unknown verb %s", req.Verb)))
		return
	}
	// Persist, then apply: the step is taken on a copy of the machine and
	// the record; both replace the live ones only once the record is
	// written. A failed write changes nothing, and the verb can be retried.
	next := a.m.Clone()
	t, err := next.Apply(v, by)
	if err != nil {
		var re *lifecycle.RefusedError
		if errors.As(err, &re) {
			err = errdefs.Refused("sandbox %s: %w", a.name, err)
		}
		r := errdefs.Reply(err)
		r.Sandbox = a.status()
		ctx.Respond(r)
		return
	}
	rec := a.rec
	switch v {
	case lifecycle.VerbStart, lifecycle.VerbRecover:
		rec.Intent = store.IntentRunning
	case lifecycle.VerbStop, lifecycle.VerbStopForce:
		rec.Intent = store.IntentStopped
	case lifecycle.VerbDelete, lifecycle.VerbDeleteKeepWorkspace:
		rec.Intent, rec.KeepWorkspace = store.IntentDeleted, v == lifecycle.VerbDeleteKeepWorkspace
	}
	rec.Lifecycle = next.Snapshot()
	rev, err := a.put(rec)
	if err != nil {
		r := errdefs.Reply(errdefs.Unavailable("sandbox %s: %s not done: %w (nothing changed; retry)", a.name, v, err))
		r.Sandbox = a.status()
		ctx.Respond(r)
		a.conflicted(err)
		return
	}
	rec.Revision = rev
	a.m, a.rec = next, rec
	// The parent's cache first: the client's next request (a create of
	// this name after its delete) reaches the parent after this update.
	st := a.status()
	ctx.Send(ctx.Parent(), &statusUpdate{status: st})
	ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: st})
	a.carryOut(ctx, t)
}

func verbOf(v messages.Verb) (lifecycle.Verb, bool) {
	switch v {
	case messages.Verb_VERB_START:
		return lifecycle.VerbStart, true
	case messages.Verb_VERB_STOP:
		return lifecycle.VerbStop, true
	case messages.Verb_VERB_STOP_FORCE:
		return lifecycle.VerbStopForce, true
	case messages.Verb_VERB_RECOVER:
		return lifecycle.VerbRecover, true
	case messages.Verb_VERB_DELETE:
		return lifecycle.VerbDelete, true
	case messages.Verb_VERB_DELETE_KEEP_WORKSPACE:
		return lifecycle.VerbDeleteKeepWorkspace, true
	default:
		return 0, false
	}
}

// step runs one machine step for an event and carries it out. An event the
// machine does not expect in this phase is logged and ignored.
func (a *sandboxActor) step(ctx actor.Context, f func() (lifecycle.Transition, error)) {
	t, err := f()
	if err != nil {
		a.env.Log.Info().Err(err).Str("sandbox", a.name).Msg("event ignored")
		return
	}
	a.finish(ctx, t)
}

// finish persists a transition, then carries it out.
func (a *sandboxActor) finish(ctx actor.Context, t lifecycle.Transition) {
	if !t.Done {
		a.persist(ctx)
	}
	a.carryOut(ctx, t)
}

// put writes rec (conditional on its revision), bounded by storeTimeout,
// and returns the new revision.
func (a *sandboxActor) put(rec store.Record) (uint64, error) {
	sctx, cancel := bounded(storeTimeout)
	defer cancel()
	rev, err := a.env.Store.Put(sctx, rec)
	if err != nil {
		return 0, fmt.Errorf("save state: %w", err)
	}
	return rev, nil
}

// persistErr writes the live record and machine.
func (a *sandboxActor) persistErr() error {
	a.rec.Lifecycle = a.m.Snapshot()
	rev, err := a.put(a.rec)
	if err != nil {
		return errdefs.Unavailable("sandbox %s: %w", a.name, err)
	}
	a.rec.Revision = rev
	return nil
}

// persist saves the record after an event; a failed write is logged (the
// event happened: the in-memory state goes on, and the next write carries
// it).
func (a *sandboxActor) persist(ctx actor.Context) {
	if err := a.persistErr(); err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("state not saved")
		a.conflicted(err)
	}
	ctx.Send(ctx.Parent(), &statusUpdate{status: a.status()})
}

// conflicted: a write found the record changed by another writer, so
// this actor's copy is stale. It fails; its supervisor restarts it, and
// it reloads the record (in a cluster: another node may own it now).
//
// A write refused because this node does not own the sandbox (cluster:
// its lease lapsed, or another node claimed it) fails the same way, before
// the transition is carried out; the restarted actor finds it is not the
// owner and stops without touching the supervisor.
func (a *sandboxActor) conflicted(err error) {
	if errors.Is(err, store.ErrNotOwner) {
		panic(fmt.Errorf("sandbox %s: not owned by this node: %w", a.name, err))
	}
	if errors.Is(err, store.ErrConflict) {
		panic(fmt.Errorf("sandbox %s: reloading: %w", a.name, err))
	}
}

// carryOut audits the transition's records, arms its timer and performs its
// action.
func (a *sandboxActor) carryOut(ctx actor.Context, t lifecycle.Transition) {
	for _, r := range t.Records {
		a.recordTransition(r)
	}
	switch {
	case t.Timer.Kind != lifecycle.TimerNone:
		a.cancelTimer()
		self, sys, seq := ctx.Self(), ctx.ActorSystem(), t.Timer.Seq
		a.stopTimer = a.env.Clock.AfterFunc(t.Timer.At.Sub(a.env.Clock.Now()), func() { sys.Root.Send(self, &timerFired{seq: seq}) })
	case !a.m.TimerPending():
		// The machine voided its timer (a phase change): cancel ours, so
		// no stale fire reaches the machine (and the store).
		a.cancelTimer()
	}
	ctx.Send(ctx.Parent(), &statusUpdate{status: a.status()})
	switch t.Action {
	case lifecycle.ActionSpawn:
		a.spawn(ctx)
	case lifecycle.ActionStop:
		a.stopSupervisor(ctx, stopGrace, false)
	case lifecycle.ActionKill:
		a.stopSupervisor(ctx, 0, false)
	case lifecycle.ActionReap:
		a.reap(ctx)
	case lifecycle.ActionDelete, lifecycle.ActionDeleteKeepWorkspace:
		a.stopSupervisor(ctx, 0, true)
	}
	if t.Done {
		a.env.Log.Info().Str("sandbox", a.name).Bool("keep_workspace", a.rec.KeepWorkspace).Msg("sandbox deleted")
		// The parent forgets the name, then tells this actor, which stops
		// only then: a request the parent routed here before it forgot is
		// in the mailbox ahead of that notice and is answered NotFound
		// (stopping at once would drop it, and its client would wait for
		// an answer that never comes).
		a.vanish(ctx)
	}
}

// vanish ends this actor's sandbox (deleted, or a create that failed): the
// parent forgets it and says so, and the actor stops only then.
func (a *sandboxActor) vanish(ctx actor.Context) {
	a.gone = true
	a.cancelTimer()
	ctx.Send(ctx.Parent(), &deleted{name: a.name, pid: ctx.Self()})
}

// afterDelete answers what reaches a deleted sandbox until its parent has
// forgotten it, then stops.
func (a *sandboxActor) afterDelete(ctx actor.Context) {
	gone := errdefs.NotFound("no sandbox named %q (stockade sandbox list shows them)", a.name)
	switch ctx.Message().(type) {
	case *forgotten:
		ctx.Stop(ctx.Self())
	case *messages.Hello:
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_NOT_FOUND, Message: gone.Error() + "; exit"})
	case *messages.SandboxRequest, *messages.PolicyRequest, *messages.RelayRequest, *messages.FaultRequest:
		ctx.Respond(errdefs.Reply(gone))
	case *actor.Stopping:
		a.stopWatching()
		if a.audit != nil {
			_ = a.audit.Close()
		}
	}
}

func (a *sandboxActor) cancelTimer() {
	if a.stopTimer != nil {
		a.stopTimer()
		a.stopTimer = nil
	}
}

func (a *sandboxActor) recordTransition(r lifecycle.Record) {
	a.env.Log.Info().Str("sandbox", a.name).Str("from", r.From.String()).Str("to", r.To.String()).
		Str("reason", r.Reason.String()).Str("detail", r.Message).Str("by", r.By).Msg("sandbox transition")
	if a.audit == nil {
		return
	}
	e := audit.NewDecision(audit.ClassLifecycle, true, reason.None)
	if r.To == lifecycle.PhaseError {
		e.SeverityID, e.SeverityName = audit.SeverityMedium, audit.SeverityMedium.String()
	}
	e.Time = r.At
	e.ActivityName = r.To.String()
	e.Sandbox = a.name
	e.Message = fmt.Sprintf("%s -> %s", r.From, r.To)
	if r.Reason != lifecycle.ReasonNone {
		e.Message += " (" + r.Reason.String() + ")"
	}
	if r.Message != "" {
		e.Message += ": " + r.Message
	}
	if r.By != "" {
		e.Message += " by " + r.By
		e.Unmapped = map[string]string{"by": r.By}
	}
	a.audit.Record(e)
}

// hello accepts a supervisor's session for the current instance.
func (a *sandboxActor) hello(ctx actor.Context, h *messages.Hello) {
	if h.Instance != a.rec.InstanceID || a.spawnAfter != nil {
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_REFUSED,
			Message: fmt.Sprintf("instance %s of sandbox %s is not current (current: %s, being replaced: %t); exit", h.Instance, a.name, a.rec.InstanceID, a.spawnAfter != nil)})
		return
	}
	if a.session != nil && a.supRemote.Equal(h.Supervisor) && a.env.Clock.Now().Sub(a.sessionAt) < contract.HeartbeatEvery {
		// Two Hellos of one supervisor crossed (one forwarded by another
		// node, one sent here after a Reconnect): both get the session
		// the first made, so whichever answer the supervisor keeps, its
		// heartbeats reach the live session.
		ctx.Respond(a.helloAck(a.session))
		return
	}
	a.dropSession(ctx)
	a.supRemote, a.hostKey = h.Supervisor, h.HostKey
	leaf := supervise.OneForOne(0, 0, supervise.StopOnFailure, supervise.WithLogger(a.env.Log), supervise.WithCounters(a.children))
	props := actor.PropsFromProducer(func() actor.Actor {
		return &sessionActor{sandbox: ctx.Self(), name: a.name, remote: h.Supervisor, log: a.env.Log.With().Str("sandbox", a.name).Logger()}
	}, actor.WithSupervisor(leaf), actor.WithReceiverMiddleware(supervise.PanicStack(a.env.Log)))
	a.sessions++
	pid, err := ctx.SpawnNamed(props, "session/"+strconv.Itoa(a.sessions))
	if err != nil {
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_INTERNAL, Message: fmt.Sprintf("spawn session: %v", err)})
		return
	}
	ctx.Watch(pid)
	a.session, a.sessionSeen, a.sessionAt = pid, true, a.env.Clock.Now()
	a.rec.SupervisorPID, a.rec.WorkloadPID = int(h.SupervisorPid), int(h.WorkloadPid)
	a.rec.SupervisorAddr = h.Supervisor.GetAddress()
	a.rec.ShiftIDs = nil // this instance's supervisor moved them before it started the sandbox
	if a.sup == nil {
		actx, cancel := bounded(startTimeout)
		p, err := a.env.Driver.Adopt(actx, a.name, int(h.SupervisorPid))
		cancel()
		if err == nil {
			a.sup = p
			a.watch(ctx, p, h.Instance)
		}
	}
	ctx.Respond(a.helloAck(pid))
	if h.PolicyVersion != a.rec.Spec.PolicyVersion {
		// A policy set it missed (it was starting, or cut off): push it now.
		a.env.Log.Info().Str("sandbox", a.name).Uint64("supervisor_has", h.PolicyVersion).
			Uint64("current", a.rec.Spec.PolicyVersion).Msg("pushing the current policy to the supervisor")
		ctx.Send(a.supRemote, a.setPolicy())
	}
	a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.SessionUp{}, a.supervisor()) })
}

// helloAck accepts a Hello with session.
func (a *sandboxActor) helloAck(session *actor.PID) *messages.HelloAck {
	ack := &messages.HelloAck{Status: messages.Status_STATUS_OK, Session: session, HeartbeatMs: contract.HeartbeatEvery.Milliseconds()}
	if a.env.Cluster != nil {
		ack.Gateways = a.env.Cluster.Gateways() // the supervisor may reach any of them
	}
	return ack
}

// openRelay arranges an SSH relay between the requesting client and the
// supervisor: two one-time tokens, one for each side.
func (a *sandboxActor) openRelay(ctx actor.Context) {
	if err := a.m.Check(lifecycle.VerbExec); err != nil {
		ctx.Respond(errdefs.Reply(errdefs.Refused("sandbox %s: %w", a.name, err)))
		return
	}
	if a.session == nil || a.supRemote == nil {
		ctx.Respond(errdefs.Reply(errdefs.Unavailable("sandbox %s has no supervisor session right now; retry in a moment", a.name)))
		return
	}
	tc, ts := relay.NewToken(), relay.NewToken()
	ctx.Send(a.env.RelayListener, &relay.Expect{ClientToken: tc, SupervisorToken: ts, Session: a.session, Sandbox: a.name})
	ctx.Send(a.supRemote, &messages.OpenRelay{Token: ts, Addr: a.env.RelayAddr})
	ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, RelayAddr: a.env.RelayAddr, RelayToken: tc, HostKey: a.hostKey})
}

// dropSession ends the current session child without reporting a loss,
// and forgets the supervisor's address: requests for it are refused until
// the next Hello instead of going to a supervisor that may be gone.
func (a *sandboxActor) dropSession(ctx actor.Context) {
	if a.session != nil {
		ctx.Unwatch(a.session)
		ctx.Stop(a.session)
		a.session = nil
	}
	a.supRemote = nil
}

func (a *sandboxActor) status() *messages.SandboxStatus {
	rec := a.rec
	rec.Lifecycle = a.m.Snapshot()
	st := recordStatus(rec)
	st.Workspace, st.Restarts = a.env.Driver.Workspace(a.name), map[string]int64{}
	if c := a.env.Cluster; c != nil && c.Owns(a.name) {
		st.Node = c.Self() // only while the node's lease says so
	}
	if d, ok := a.sup.(interface{ Drift() string }); ok && d.Drift() != "" {
		// The process driver: an adopted supervisor runs with boundary
		// settings the gateway no longer has.
		st.Message = strings.TrimPrefix(st.Message+"; "+d.Drift(), "; ")
	}
	st.Resources = a.resources
	if st.Resources == nil { // no report yet: the limits as created
		l := a.rec.Spec.Limits.Or(a.env.limits())
		st.Resources = &messages.Resources{Limits: limitsProto(l), Note: "no report from a supervisor yet"}
	}
	for k, v := range a.hbRestarts {
		st.Restarts[k] = v
	}
	// The sandboxes strategy counts this actor under its name; session and
	// relay actors are stopped on failure, so their failures are counted.
	st.Restarts["sandbox"] = a.env.Counters.Get(a.name, actor.RestartDirective)
	for _, kind := range []string{"session", "relay"} {
		st.Restarts[kind] = a.children.Get(kind, actor.RestartDirective) + a.children.Get(kind, actor.StopDirective)
	}
	return st
}

// orSelf is by, or self when by is empty (a record from before creators
// were recorded).
func orSelf(by, self string) string {
	if by == "" {
		return self
	}
	return by
}

// reasonText is "" for no reason (the JSON of `sandbox get`).
func reasonText(r lifecycle.Reason) string {
	if r == lifecycle.ReasonNone {
		return ""
	}
	return r.String()
}

func newInstance() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newUID names one creation of a sandbox.
func newUID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
