package lifecycle

import "slices"

// phaseState is one phase of the machine: the verbs it accepts (besides the
// reads get and logs, accepted everywhere), the phases it may move to, and
// the advice given with a refusal. The Machine checks every move against
// next(), so the graph below is the whole truth about transitions.
type phaseState interface {
	phase() Phase
	verbs() []Verb
	next() []Phase
	advice(v Verb) string
}

func stateOf(p Phase) phaseState {
	switch p {
	case PhaseProvisioning:
		return provisioningState{}
	case PhaseReady:
		return readyState{}
	case PhaseStopping:
		return stoppingState{}
	case PhaseStopped:
		return stoppedState{}
	case PhaseCompleted:
		return completedState{}
	case PhaseError:
		return errorState{}
	case PhaseRecovering:
		return recoveringState{}
	case PhaseDeleting:
		return deletingState{}
	default:
		return noneState{}
	}
}

// accepts reports whether verb v works in phase p.
func accepts(p Phase, v Verb) bool {
	return v.read() || slices.Contains(stateOf(p).verbs(), v)
}

// noneState is a machine not created yet: only create works.
type noneState struct{}

func (noneState) phase() Phase         { return PhaseNone }
func (noneState) verbs() []Verb        { return []Verb{VerbCreate} }
func (noneState) next() []Phase        { return []Phase{PhaseProvisioning} }
func (noneState) advice(v Verb) string { return "create it first" }

// provisioningState: the supervisor is being started; Ready when its session
// is up.
type provisioningState struct{}

func (provisioningState) phase() Phase { return PhaseProvisioning }
func (provisioningState) verbs() []Verb {
	return []Verb{VerbStop, VerbStopForce, VerbDelete, VerbDeleteKeepWorkspace}
}
func (provisioningState) next() []Phase {
	return []Phase{PhaseReady, PhaseStopping, PhaseCompleted, PhaseError, PhaseDeleting}
}
func (provisioningState) advice(Verb) string {
	return "it is starting; wait for Ready, or use stop to cancel the start"
}

// readyState: supervisor, session and workload are up.
type readyState struct{}

func (readyState) phase() Phase { return PhaseReady }
func (readyState) verbs() []Verb {
	return []Verb{VerbStop, VerbStopForce, VerbDelete, VerbDeleteKeepWorkspace, VerbExec, VerbConnect}
}
func (readyState) next() []Phase {
	return []Phase{PhaseStopping, PhaseCompleted, PhaseError, PhaseDeleting}
}
func (readyState) advice(v Verb) string {
	if v == VerbRecover {
		return "it is running and has nothing to recover; use stop, then start, to restart it"
	}
	return "it is already running; use stop, then start, to restart it"
}

// stoppingState: a stop is in progress; StopDone moves it to Stopped.
type stoppingState struct{}

func (stoppingState) phase() Phase { return PhaseStopping }
func (stoppingState) verbs() []Verb {
	return []Verb{VerbStopForce, VerbDelete, VerbDeleteKeepWorkspace}
}
func (stoppingState) next() []Phase { return []Phase{PhaseStopped, PhaseDeleting} }
func (stoppingState) advice(v Verb) string {
	if v == VerbStop {
		return "it is already stopping; use stop --force to kill it without grace"
	}
	return "it is stopping; wait for Stopped, or use stop --force to kill it without grace"
}

// stoppedState: stopped on request; nothing runs; the workspace is kept.
type stoppedState struct{}

func (stoppedState) phase() Phase  { return PhaseStopped }
func (stoppedState) verbs() []Verb { return []Verb{VerbStart, VerbDelete, VerbDeleteKeepWorkspace} }
func (stoppedState) next() []Phase { return []Phase{PhaseProvisioning, PhaseDeleting} }
func (stoppedState) advice(v Verb) string {
	if v == VerbExec || v == VerbConnect {
		return "it is stopped; use start, then wait for Ready"
	}
	return "it is stopped; use start to run it again, or delete to remove it"
}

// completedState: the workload exited 0; nothing runs.
type completedState struct{}

func (completedState) phase() Phase  { return PhaseCompleted }
func (completedState) verbs() []Verb { return []Verb{VerbStart, VerbDelete, VerbDeleteKeepWorkspace} }
func (completedState) next() []Phase {
	return []Phase{PhaseProvisioning, PhaseRecovering, PhaseDeleting}
}
func (completedState) advice(v Verb) string {
	if v == VerbExec || v == VerbConnect {
		return "its workload exited; use start, then wait for Ready"
	}
	return "its workload exited with code 0; use start to run it again, or delete to remove it"
}

// errorState: a failure with a Reason. Recoverable reasons move on to
// Recovering at once; Error stays only for RecoveryExhausted, for
// WorkloadFailed and StartFailed with restart: never, and for a StartFailed
// that cannot heal (StartFailed.Permanent). Never a dead end.
type errorState struct{}

func (errorState) phase() Phase { return PhaseError }
func (errorState) verbs() []Verb {
	return []Verb{VerbStart, VerbStop, VerbStopForce, VerbRecover, VerbDelete, VerbDeleteKeepWorkspace}
}
func (errorState) next() []Phase {
	return []Phase{PhaseProvisioning, PhaseStopping, PhaseRecovering, PhaseDeleting}
}
func (errorState) advice(Verb) string {
	return "use recover to retry now, or start to start afresh, then wait for Ready"
}

// recoveringState: waiting for a reconnect, for the next attempt, or for
// an attempt in flight.
type recoveringState struct{}

func (recoveringState) phase() Phase { return PhaseRecovering }
func (recoveringState) verbs() []Verb {
	return []Verb{VerbStop, VerbStopForce, VerbRecover, VerbDelete, VerbDeleteKeepWorkspace}
}
func (recoveringState) next() []Phase {
	return []Phase{PhaseReady, PhaseRecovering, PhaseCompleted, PhaseError, PhaseStopping, PhaseDeleting}
}
func (recoveringState) advice(v Verb) string {
	if v == VerbStart {
		return "recovery is already restarting it; use recover to retry now, or stop to stop it"
	}
	return "it is recovering; wait for Ready, or use recover to retry now"
}

// deletingState: a delete is in progress; DeleteDone ends the machine.
type deletingState struct{}

func (deletingState) phase() Phase  { return PhaseDeleting }
func (deletingState) verbs() []Verb { return nil }
func (deletingState) next() []Phase { return nil }
func (deletingState) advice(Verb) string {
	return "it is being deleted; only get and logs work until it is gone"
}
