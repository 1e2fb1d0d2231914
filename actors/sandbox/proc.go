package sandbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/store"
)

// The supervisor process of a sandbox, through the Driver seam: the
// machine's spawn, stop, kill, reap and delete actions. Starting and
// adopting are calls with a deadline; waiting for a supervisor to die and
// removing files run off the actor and report back (previousStopped,
// actionDone, supervisorExited).

// spawn starts a new supervisor instance on the existing workspace. Never
// two supervisors on one workspace: a previous one is killed, off the
// actor, and the new one starts when it is gone (previousStopped).
func (a *sandboxActor) spawn(ctx actor.Context) {
	a.dropSession(ctx)
	if p := a.sup; p != nil {
		a.sup, a.dying, a.spawnAfter = nil, p, p
		self, sys := ctx.Self(), ctx.ActorSystem()
		go func() {
			kctx, cancel := bounded(killWait)
			err := p.Stop(kctx, 0)
			cancel()
			sys.Root.Send(self, &previousStopped{proc: p, err: err})
		}()
		return
	}
	a.launch(ctx)
}

// previousStopped continues a spawn once the supervisor it replaces is
// gone; a stop or delete in between cancelled the spawn.
func (a *sandboxActor) previousStopped(ctx actor.Context, m *previousStopped) {
	if m.err == nil && a.dying == m.proc {
		a.dying = nil
	}
	if a.spawnAfter != m.proc {
		return
	}
	a.spawnAfter = nil
	if m.err != nil {
		a.env.Log.Error().Err(m.err).Str("sandbox", a.name).Msg("the previous supervisor did not exit")
		a.step(ctx, func() (lifecycle.Transition, error) {
			return a.m.On(lifecycle.StartFailed{Detail: fmt.Sprintf("the previous supervisor (pid %d) did not exit: %v", m.proc.Pid(), m.err)}, a.self())
		})
		return
	}
	a.launch(ctx)
}

// launch starts a supervisor for a new instance (bounded by startTimeout).
func (a *sandboxActor) launch(ctx actor.Context) {
	// A record of an earlier version (no range) or with a range outside
	// the pool gets one now, written before any supervisor runs as it.
	changed, err := a.assignIDs(&a.rec, false)
	if err == nil && changed && a.env.Cluster == nil {
		err = a.persistErr() // a cluster's launch writes the record below
	}
	if err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("no host id range; supervisor not started")
		a.conflicted(err)
		a.step(ctx, func() (lifecycle.Transition, error) {
			return a.m.On(lifecycle.StartFailed{Detail: err.Error()}, a.self())
		})
		return
	}
	inst := newInstance()
	a.rec.InstanceID, a.rec.SupervisorPID, a.rec.WorkloadPID = inst, 0, 0
	a.sessionSeen = false
	if a.env.Cluster != nil {
		// In a cluster the new instance is written (fenced by ownership)
		// before its supervisor starts: a node that lost the sandbox
		// fails here, before starting a second supervisor.
		if err := a.persistErr(); err != nil {
			a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("new instance not saved; supervisor not started")
			a.conflicted(err)
			a.step(ctx, func() (lifecycle.Transition, error) {
				return a.m.On(lifecycle.StartFailed{Detail: err.Error()}, a.self())
			})
			return
		}
	}
	sctx, cancel := bounded(startTimeout)
	hostIDs, shiftIDs := a.launchIDs()
	p, err := a.env.Driver.Start(sctx, driver.Launch{Instance: inst, Spec: a.rec.Spec, HostIDs: hostIDs, ShiftIDs: shiftIDs})
	cancel()
	if err != nil {
		a.persist(ctx)
		a.step(ctx, func() (lifecycle.Transition, error) {
			return a.m.On(lifecycle.StartFailed{Detail: err.Error()}, a.self())
		})
		return
	}
	a.sup, a.rec.SupervisorPID = p, p.Pid()
	a.persist(ctx)
	a.watch(ctx, p, inst)
}

// watch reports the end of a supervisor to the actor. It gives up when
// this actor instance stops or restarts (unwatch): a supervisor outlives
// its actor (a gateway restart, a node that lost the sandbox), and a
// restarted or re-owned actor watches it anew.
func (a *sandboxActor) watch(ctx actor.Context, p driver.Proc, inst string) {
	if a.unwatch == nil {
		a.unwatch = make(chan struct{})
	}
	self, sys, quit := ctx.Self(), ctx.ActorSystem(), a.unwatch
	go func() {
		select {
		case <-p.Done():
		case <-quit:
			return
		}
		detail, permanent := "supervisor exited", false
		if err := p.Err(); err != nil {
			detail, permanent = err.Error(), errors.Is(err, driver.ErrCannotStart)
		}
		sys.Root.Send(self, &supervisorExited{instance: inst, proc: p, detail: detail, cannotStart: permanent})
	}()
}

// stopWatching ends this instance's watches (it stops or restarts).
func (a *sandboxActor) stopWatching() {
	if a.unwatch != nil {
		close(a.unwatch)
		a.unwatch = nil
	}
}

// supervisorExited turns the end of the current supervisor into a machine
// event; the end of any other (replaced, stopped) is expected.
func (a *sandboxActor) supervisorExited(ctx actor.Context, m *supervisorExited) {
	if a.dying == m.proc {
		a.dying = nil
	}
	if a.sup != m.proc || m.instance != a.rec.InstanceID {
		return
	}
	a.sup = nil
	up := a.session != nil || a.sessionSeen
	a.dropSession(ctx)
	a.step(ctx, func() (lifecycle.Transition, error) {
		switch {
		case !up && a.m.Phase() == lifecycle.PhaseProvisioning:
			return a.m.On(lifecycle.StartFailed{Detail: m.detail, Permanent: m.cannotStart}, a.self())
		case !up && a.m.Phase() == lifecycle.PhaseRecovering:
			return a.m.On(lifecycle.RecoveryAttemptFailed{Detail: m.detail, Permanent: m.cannotStart}, a.self())
		default:
			return a.m.On(lifecycle.SupervisorLost{Detail: m.detail}, a.self())
		}
	})
}

// stopSupervisor stops the supervisor (and one being replaced) off the
// actor, removes the sandbox's files for a delete, and reports actionDone.
// A spawn waiting for a previous supervisor is cancelled.
func (a *sandboxActor) stopSupervisor(ctx actor.Context, grace time.Duration, remove bool) {
	a.dropSession(ctx)
	// Supervisors an earlier stop is still stopping are included: a
	// delete during Stopping must not remove the files under a live one.
	procs := a.stopping
	for _, p := range []driver.Proc{a.sup, a.dying} {
		if p != nil {
			procs = append(procs, p)
		}
	}
	a.sup, a.dying, a.spawnAfter, a.stopping = nil, nil, nil, procs
	a.actionSeq++
	seq, drv, name, uid, keep := a.actionSeq, a.env.Driver, a.name, a.rec.Spec.UID, a.rec.KeepWorkspace
	self, sys := ctx.Self(), ctx.ActorSystem()
	go func() {
		var errs []error
		for _, p := range procs {
			sctx, cancel := bounded(grace + killWait)
			errs = append(errs, p.Stop(sctx, grace))
			cancel()
		}
		if remove {
			rctx, cancel := bounded(removeTimeout)
			errs = append(errs, drv.Remove(rctx, name, uid, keep))
			cancel()
		}
		sys.Root.Send(self, &actionDone{seq: seq, err: errors.Join(errs...)})
	}()
}

// reap ends a supervisor whose workload is done (off the actor, bounded).
func (a *sandboxActor) reap(ctx actor.Context) {
	a.dropSession(ctx)
	if p := a.sup; p != nil {
		a.sup = nil
		go func() {
			sctx, cancel := bounded(killWait)
			_ = p.Stop(sctx, 0)
			cancel()
		}()
	}
}

func (a *sandboxActor) afterAction(ctx actor.Context, m *actionDone) {
	if m.seq != a.actionSeq {
		return // an earlier action's report
	}
	a.stopping = nil
	if m.err != nil {
		a.env.Log.Warn().Err(m.err).Str("sandbox", a.name).Msg("supervisor stop")
	}
	switch a.m.Phase() {
	case lifecycle.PhaseStopping:
		a.rec.SupervisorPID, a.rec.WorkloadPID = 0, 0
		a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.StopDone{}, a.self()) })
	case lifecycle.PhaseDeleting:
		a.deleteRecord(ctx)
	}
}

// deleteRecord removes the record of a deleted sandbox; a failed write is
// retried with a backoff (1 s doubling to 30 s) until it works.
func (a *sandboxActor) deleteRecord(ctx actor.Context) {
	sctx, cancel := bounded(storeTimeout)
	err := a.env.Store.Delete(sctx, a.name, a.rec.Revision)
	cancel()
	if errors.Is(err, store.ErrNotOwner) {
		a.conflicted(err)
	}
	if err != nil {
		a.recordRetry = min(max(2*a.recordRetry, time.Second), 30*time.Second)
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Dur("retry_in", a.recordRetry).Msg("delete record; retrying")
		self, sys := ctx.Self(), ctx.ActorSystem()
		a.env.Clock.AfterFunc(a.recordRetry, func() { sys.Root.Send(self, &retryRecordDelete{}) })
		return
	}
	a.releaseIDs()
	a.step(ctx, func() (lifecycle.Transition, error) { return a.m.On(lifecycle.DeleteDone{}, a.self()) })
}
