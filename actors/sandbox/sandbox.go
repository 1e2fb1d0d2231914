package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/driver/process"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy/reason"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// supervisorMarker is in every supervisor's command line (Adopt checks it).
const supervisorMarker = "supervisor"

// stopGrace is how long a graceful stop waits before SIGKILL.
const stopGrace = 10 * time.Second

// killWait bounds waiting, inside Receive, for a SIGKILLed supervisor to
// be gone before its successor starts.
const killWait = 5 * time.Second

// sandboxActor is sandbox/NAME. Its state is the store record; after a
// restart it reloads it and adopts the supervisor if it still runs.
type sandboxActor struct {
	env  *Env
	name string
	// init is set for a create; nil for a restore.
	init *create

	m          *lifecycle.Machine
	rec        store.Record
	sup        *process.Handle
	session    *actor.PID // the session child of the current instance
	hbRestarts map[string]int64
	resources  *messages.Resources // as the supervisor last reported
	sessions   int                 // session children spawned (names session/N)
	// sessionSeen: the current instance said Hello at least once.
	sessionSeen bool
	supRemote   *actor.PID // the supervisor's session actor (current instance)
	hostKey     string     // the sandbox's SSH host key
	// children counts the directives applied to this sandbox's session
	// and relay actors (kept across their replacements).
	children *supervise.Counters
	cancel   scheduler.CancelFunc
	audit    *audit.File
	timers   *scheduler.TimerScheduler
}

func (a *sandboxActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.timers = scheduler.NewTimerScheduler(ctx)
		a.children = supervise.NewCounters()
		a.start(ctx)
	case *messages.SandboxRequest:
		if a.fromClient(ctx) {
			a.verb(ctx, m)
		}
	case *messages.Hello:
		if a.from(ctx, trust.RoleSupervisor, a.name) && a.helloAddressOK(ctx, m) {
			a.hello(ctx, m)
		}
	case *messages.RelayRequest:
		if a.fromClient(ctx) {
			a.openRelay(ctx)
		}
	case *messages.PolicyRequest:
		if a.fromClient(ctx) {
			a.policyRequest(ctx, m)
		}
	case *messages.FaultRequest:
		if !a.fromClient(ctx) {
			return
		}
		if a.supRemote == nil {
			ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_REFUSED, Message: fmt.Sprintf("sandbox %s has no supervisor session", a.name)})
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
				return a.m.On(lifecycle.WorkloadExited{Code: int(m.Code), Detail: m.Detail})
			})
		}
	case *messages.BoundaryFailed:
		if !a.fromOwnSession(ctx) {
			return
		}
		if m.Instance == a.rec.InstanceID {
			a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.BoundaryFailed{Detail: m.Detail}) })
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
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.TimerFired{Seq: m.seq}) })
	case *supervisorExited:
		if m.instance != a.rec.InstanceID {
			return // an earlier instance, already replaced
		}
		a.sup = nil
		up := a.session != nil || a.sessionSeen
		a.dropSession(ctx)
		detail := m.detail
		if last := lastLine(a.env.Dir(a.name) + "/supervisor.log"); last != "" {
			detail += ": " + last
		}
		a.step(ctx, func() (lifecycle.Transition, error) {
			switch {
			case !up && a.m.Phase() == lifecycle.PhaseProvisioning:
				return a.m.On(lifecycle.StartFailed{Detail: detail})
			case !up && a.m.Phase() == lifecycle.PhaseRecovering:
				return a.m.On(lifecycle.RecoveryAttemptFailed{Detail: detail})
			default:
				return a.m.On(lifecycle.SupervisorLost{Detail: detail})
			}
		})
	case *actionDone:
		a.afterAction(ctx, m)
	case *actor.Terminated:
		if a.session != nil && m.Who.Equal(a.session) {
			a.session = nil
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.SessionLost{Detail: "no heartbeat from the supervisor"})
			})
		}
	case *actor.Restarting:
		// The session child is stopped with this instance: no loss to record.
		a.session = nil
	case *actor.Stopping:
		// The gateway (or a delete) stops this actor: its session child is
		// stopped with it, and its Terminated, delivered after this, is no
		// session loss (recording one would persist a false Error/SessionLost
		// at every gateway shutdown, with its audit file already closed).
		a.session = nil
		if a.cancel != nil {
			a.cancel()
		}
		if a.audit != nil {
			_ = a.audit.Close()
		}
	}
}

func (a *sandboxActor) start(ctx actor.Context) {
	af, err := a.env.openLifecycleAudit(a.name)
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("lifecycle audit unavailable")
	}
	a.audit = af
	if a.init != nil {
		a.rec = store.Record{Spec: a.init.spec, Intent: store.IntentRunning}
		a.m = lifecycle.New(a.lifecycleConfig())
		t, err := a.m.Apply(lifecycle.VerbCreate)
		if err != nil {
			ctx.Send(a.init.respondTo, &messages.Reply{Status: messages.Status_STATUS_INTERNAL, Message: err.Error()})
			ctx.Stop(ctx.Self())
			return
		}
		if err := os.MkdirAll(a.env.Workspace(a.name), 0o755); err != nil {
			ctx.Send(a.init.respondTo, &messages.Reply{Status: messages.Status_STATUS_INTERNAL,
				Message: fmt.Sprintf("create workspace %s: %v", a.env.Workspace(a.name), err)})
			ctx.Stop(ctx.Self())
			return
		}
		if err := a.persistErr(); err != nil {
			ctx.Send(a.init.respondTo, &messages.Reply{Status: messages.Status_STATUS_INTERNAL, Message: err.Error()})
			ctx.Stop(ctx.Self())
			return
		}
		// Acknowledged only now: the record is on disk.
		ctx.Send(a.init.respondTo, &messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.status()})
		a.carryOut(ctx, t)
		return
	}
	rec, err := a.env.Store.Get(a.name)
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("sandbox record unreadable; actor stops")
		ctx.Stop(ctx.Self())
		return
	}
	a.rec = rec
	h, err := process.Adopt(rec.SupervisorPID, supervisorMarker)
	alive := err == nil
	if alive {
		a.sup = h
		a.watch(ctx, h, rec.InstanceID)
	}
	m, t, err := lifecycle.Restore(rec.Lifecycle, a.lifecycleConfig(), alive)
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("restore lifecycle")
		ctx.Stop(ctx.Self())
		return
	}
	a.m = m
	a.env.Log.Info().Str("sandbox", a.name).Bool("supervisor_alive", alive).Int("supervisor_pid", rec.SupervisorPID).
		Str("phase", m.Phase().String()).Msg("sandbox re-adopted")
	a.finish(ctx, t)
}

func (a *sandboxActor) lifecycleConfig() lifecycle.Config {
	c := a.env.Lifecycle
	c.Restart = a.rec.Spec.Restart
	return c
}

// verb applies a client verb: one machine step, persisted before the reply.
func (a *sandboxActor) verb(ctx actor.Context, req *messages.SandboxRequest) {
	if req.Verb == messages.Verb_VERB_GET {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.status()})
		return
	}
	v, ok := verbOf(req.Verb)
	if !ok {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_INVALID, Message: fmt.Sprintf("unknown verb %s", req.Verb)})
		return
	}
	// Persist, then apply: the step is taken on a copy of the machine and
	// the record; both replace the live ones only once the record is on
	// disk. A failed write changes nothing, and the verb can be retried.
	next := a.m.Clone()
	t, err := next.Apply(v)
	if err != nil {
		var re *lifecycle.RefusedError
		if errors.As(err, &re) {
			ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_REFUSED, Message: fmt.Sprintf("sandbox %s: %v", a.name, err), Sandbox: a.status()})
			return
		}
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_INTERNAL, Message: err.Error()})
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
	if err := a.env.Store.Put(context.Background(), rec); err != nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_INTERNAL, Sandbox: a.status(),
			Message: fmt.Sprintf("sandbox %s: %s not done: save state: %v (nothing changed; retry)", a.name, v, err)})
		return
	}
	a.m, a.rec = next, rec
	ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Sandbox: a.status()})
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

func (a *sandboxActor) persistErr() error {
	a.rec.Lifecycle = a.m.Snapshot()
	if err := a.env.Store.Put(context.Background(), a.rec); err != nil {
		return fmt.Errorf("sandbox %s: save state: %w", a.name, err)
	}
	return nil
}

// persist saves the record; a failed write is logged (the in-memory state
// goes on; the next step writes again).
func (a *sandboxActor) persist(ctx actor.Context) {
	if err := a.persistErr(); err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("state not saved")
	}
	ctx.Send(ctx.Parent(), &statusUpdate{status: a.status()})
}

// carryOut audits the transition's records, arms its timer and performs its
// action.
func (a *sandboxActor) carryOut(ctx actor.Context, t lifecycle.Transition) {
	for _, r := range t.Records {
		a.recordTransition(r)
	}
	switch {
	case t.Timer.Kind != lifecycle.TimerNone:
		if a.cancel != nil {
			a.cancel()
		}
		a.cancel = a.timers.SendOnce(time.Until(t.Timer.At), ctx.Self(), &timerFired{seq: t.Timer.Seq})
	case a.cancel != nil && !a.m.TimerPending():
		// The machine voided its timer (a phase change): cancel ours, so
		// no stale fire reaches the machine (and the store).
		a.cancel()
		a.cancel = nil
	}
	ctx.Send(ctx.Parent(), &statusUpdate{status: a.status()})
	switch t.Action {
	case lifecycle.ActionSpawn:
		a.spawn(ctx)
	case lifecycle.ActionStop:
		a.stopSupervisor(ctx, stopGrace)
	case lifecycle.ActionKill:
		a.stopSupervisor(ctx, 0)
	case lifecycle.ActionReap:
		a.dropSession(ctx)
		if h := a.sup; h != nil {
			a.sup = nil
			go func() { _ = h.Stop(context.Background(), 0) }()
		}
	case lifecycle.ActionDelete, lifecycle.ActionDeleteKeepWorkspace:
		a.stopSupervisor(ctx, 0)
	}
	if t.Done {
		a.env.Log.Info().Str("sandbox", a.name).Bool("keep_workspace", a.rec.KeepWorkspace).Msg("sandbox deleted")
		// The parent forgets the name now, before this actor's Terminated:
		// a request routed in between would reach a stopped actor and its
		// client would wait for an answer that never comes.
		ctx.Send(ctx.Parent(), &deleted{name: a.name, pid: ctx.Self()})
		ctx.Stop(ctx.Self())
	}
}

func (a *sandboxActor) recordTransition(r lifecycle.Record) {
	a.env.Log.Info().Str("sandbox", a.name).Str("from", r.From.String()).Str("to", r.To.String()).
		Str("reason", r.Reason.String()).Str("detail", r.Message).Msg("sandbox transition")
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
	a.audit.Record(e)
}

// spawn starts a new supervisor instance on the existing workspace.
func (a *sandboxActor) spawn(ctx actor.Context) {
	a.dropSession(ctx)
	if h := a.sup; h != nil {
		// Never two supervisors on one workspace: the old one is killed
		// and gone before a new one starts. Bounded: a supervisor that
		// does not die within killWait fails this start (retried later).
		kctx, cancel := context.WithTimeout(context.Background(), killWait)
		err := h.Stop(kctx, 0)
		cancel()
		if err != nil {
			a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("the previous supervisor did not exit")
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.StartFailed{Detail: fmt.Sprintf("the previous supervisor (pid %d) did not exit: %v", h.Pid, err)})
			})
			return
		}
		a.sup = nil
	}
	inst := newInstance()
	a.rec.InstanceID, a.rec.WorkloadPID = inst, 0
	a.sessionSeen = false
	err := a.launch(inst)
	if err != nil {
		a.persist(ctx)
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.StartFailed{Detail: err.Error()}) })
		return
	}
	a.persist(ctx)
	a.watch(ctx, a.sup, inst)
}

func (a *sandboxActor) launch(inst string) error {
	ws := a.env.Workspace(a.name)
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return fmt.Errorf("workspace %s: %w", ws, err)
	}
	creds, err := a.env.Credentials(a.name)
	if err != nil {
		return fmt.Errorf("supervisor certificate: %w", err)
	}
	s := spec.Supervisor{
		Name: a.name, Instance: inst, Gateway: a.env.Gateway, Credentials: creds, Chaos: a.env.Chaos,
		Policy: a.rec.Spec.Policy, PolicyVersion: a.rec.Spec.PolicyVersion, Argv: a.rec.Spec.Argv, Workdir: a.rec.Spec.Workdir,
		Workspace: ws, AuditFile: a.env.Dir(a.name) + "/audit.jsonl",
		Hosts: a.env.Hosts, DNSUpstream: a.env.DNSUpstream, AllowLoopback: a.env.AllowLoopback, MaxConns: a.env.MaxConns,
		Limits: specLimits(a.rec.Spec.Limits.Or(a.env.limits())), Unconfined: a.env.Unconfined,
	}
	if err := spec.Write(a.env.SpecFile(a.name), s); err != nil {
		return err
	}
	if a.env.Faults != nil {
		if err := a.env.Faults.Inject(fault.SupervisorStart); err != nil {
			return fmt.Errorf("start supervisor: %w", err)
		}
	}
	h, err := process.Start(process.Spec{
		Binary:  a.env.Binary,
		Args:    []string{supervisorMarker, "--spec", a.env.SpecFile(a.name)},
		LogFile: a.env.Dir(a.name) + "/supervisor.log",
		Dir:     a.env.Dir(a.name),
	})
	if err != nil {
		return err
	}
	a.sup = h
	a.rec.SupervisorPID = h.Pid
	return nil
}

func (a *sandboxActor) watch(ctx actor.Context, h *process.Handle, inst string) {
	self, sys := ctx.Self(), ctx.ActorSystem()
	go func() {
		<-h.Done()
		detail := "supervisor exited"
		if err := h.Err(); err != nil {
			detail = err.Error()
		}
		sys.Root.Send(self, &supervisorExited{instance: inst, detail: detail})
	}()
}

// stopSupervisor stops the supervisor off the actor and reports actionDone.
func (a *sandboxActor) stopSupervisor(ctx actor.Context, grace time.Duration) {
	a.dropSession(ctx)
	h, inst := a.sup, a.rec.InstanceID
	a.sup = nil
	self, sys := ctx.Self(), ctx.ActorSystem()
	go func() {
		var err error
		if h != nil {
			sctx, cancel := context.WithTimeout(context.Background(), grace+10*time.Second)
			err = h.Stop(sctx, grace)
			cancel()
		}
		sys.Root.Send(self, &actionDone{instance: inst, err: err})
	}()
}

func (a *sandboxActor) afterAction(ctx actor.Context, m *actionDone) {
	if m.err != nil {
		a.env.Log.Warn().Err(m.err).Str("sandbox", a.name).Msg("supervisor stop")
	}
	switch a.m.Phase() {
	case lifecycle.PhaseStopping:
		a.rec.SupervisorPID, a.rec.WorkloadPID = 0, 0
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.StopDone{}) })
	case lifecycle.PhaseDeleting:
		if !a.rec.KeepWorkspace {
			if err := os.RemoveAll(a.env.Workspace(a.name)); err != nil {
				a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("remove workspace")
			}
		}
		if err := a.env.Store.Delete(context.Background(), a.name); err != nil {
			a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("delete record; retrying on next start")
			return
		}
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.DeleteDone{}) })
	}
}

// hello accepts a supervisor's session for the current instance.
func (a *sandboxActor) hello(ctx actor.Context, h *messages.Hello) {
	if h.Instance != a.rec.InstanceID {
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_REFUSED,
			Message: fmt.Sprintf("instance %s of sandbox %s is not current (current: %s); exit", h.Instance, a.name, a.rec.InstanceID)})
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
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_INTERNAL, Message: err.Error()})
		return
	}
	ctx.Watch(pid)
	a.session, a.sessionSeen = pid, true
	a.rec.SupervisorPID, a.rec.WorkloadPID = int(h.SupervisorPid), int(h.WorkloadPid)
	if a.sup == nil {
		if hd, err := process.Adopt(int(h.SupervisorPid), supervisorMarker); err == nil {
			a.sup = hd
			a.watch(ctx, hd, h.Instance)
		}
	}
	ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_OK, Session: pid, HeartbeatMs: heartbeatEvery.Milliseconds()})
	if h.PolicyVersion != a.rec.Spec.PolicyVersion {
		// A policy set it missed (it was starting, or cut off): push it now.
		a.env.Log.Info().Str("sandbox", a.name).Uint64("supervisor_has", h.PolicyVersion).
			Uint64("current", a.rec.Spec.PolicyVersion).Msg("pushing the current policy to the supervisor")
		ctx.Send(a.supRemote, a.setPolicy())
	}
	a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.SessionUp{}) })
}

// openRelay arranges an SSH relay between the requesting client and the
// supervisor: two one-time tokens, one for each side.
func (a *sandboxActor) openRelay(ctx actor.Context) {
	if err := a.m.Check(lifecycle.VerbExec); err != nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_REFUSED, Message: fmt.Sprintf("sandbox %s: %v", a.name, err)})
		return
	}
	if a.session == nil || a.supRemote == nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_REFUSED,
			Message: fmt.Sprintf("sandbox %s has no supervisor session right now; retry in a moment", a.name)})
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
	st.Workspace, st.Restarts = a.env.Workspace(a.name), map[string]int64{}
	st.Resources = a.resources
	if st.Resources == nil { // no report yet: the limits as created
		l := a.rec.Spec.Limits.Or(a.env.limits())
		st.Resources = &messages.Resources{Limits: &messages.Limits{Pids: l.Pids, MemoryBytes: l.MemoryBytes, Cpus: l.CPUs, IoBps: l.IOBps},
			Note: "no report from a supervisor yet"}
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

// lastLine returns the last non-empty line of a log file (at most 400
// bytes of it): the supervisor's last word names why it ended.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - 4096
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && len(buf) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(buf)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 400 {
		last = last[:400]
	}
	return last
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
