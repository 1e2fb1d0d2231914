package lifecycle

import "fmt"

// Event is something the sandbox actor observed and feeds to Machine.On.
type Event interface {
	fmt.Stringer
	isEvent()
}

// failureEvent is an event that reports a failure with a Reason.
type failureEvent interface {
	Event
	failure() (Reason, string)
}

// SessionUp: the supervisor's session is up (hello received, policy loaded).
type SessionUp struct{}

// WorkloadExited: the workload exited with Code; Detail says more when
// the supervisor knows why (e.g. "out of memory (limit 2 GiB)").
type WorkloadExited struct {
	Code   int
	Detail string
}

// SessionLost: the session to a still living supervisor was cut.
type SessionLost struct{ Detail string }

// SupervisorLost: the supervisor process is gone (its sandbox died with it).
type SupervisorLost struct{ Detail string }

// StartFailed: spawning the supervisor or starting the workload failed.
// Permanent: it would fail the same way however often it is retried (the
// command is missing or not executable in the sandbox, a hard_requirement
// path is missing: driver.ErrCannotStart); the machine goes to
// Error/StartFailed without a retry timer.
type StartFailed struct {
	Detail    string
	Permanent bool
}

// BoundaryFailed: the boundary failed past its restart budget.
type BoundaryFailed struct{ Detail string }

// NodeLost: the node that ran the sandbox is gone (cluster mode).
type NodeLost struct{ Detail string }

// RecoveryAttemptFailed: the recovery attempt in flight failed for a
// reason the actor cannot name more precisely; it counts as a failed
// attempt with the reason being recovered from. Permanent: as for
// StartFailed, the attempt cannot succeed; Error/StartFailed, no retry.
type RecoveryAttemptFailed struct {
	Detail    string
	Permanent bool
}

// TimerFired: the timer a Transition asked for expired. Seq is the
// Timer's; a stale timer (replaced or voided since) is ignored.
type TimerFired struct{ Seq uint64 }

// StopDone: the stop asked for by ActionStop or ActionKill is complete.
type StopDone struct{}

// DeleteDone: the delete asked for by ActionDelete* is complete.
type DeleteDone struct{}

func (SessionUp) isEvent()             {}
func (WorkloadExited) isEvent()        {}
func (SessionLost) isEvent()           {}
func (SupervisorLost) isEvent()        {}
func (StartFailed) isEvent()           {}
func (BoundaryFailed) isEvent()        {}
func (NodeLost) isEvent()              {}
func (RecoveryAttemptFailed) isEvent() {}
func (TimerFired) isEvent()            {}
func (StopDone) isEvent()              {}
func (DeleteDone) isEvent()            {}

func (SessionUp) String() string        { return "SessionUp" }
func (e WorkloadExited) String() string { return fmt.Sprintf("WorkloadExited(%d)", e.Code) }
func (e SessionLost) String() string    { return failureString(e) }
func (e SupervisorLost) String() string { return failureString(e) }
func (e StartFailed) String() string    { return failureString(e) }
func (e BoundaryFailed) String() string { return failureString(e) }
func (e NodeLost) String() string       { return failureString(e) }
func (e RecoveryAttemptFailed) String() string {
	return "RecoveryAttemptFailed(" + e.Detail + ")"
}
func (e TimerFired) String() string { return fmt.Sprintf("TimerFired(%d)", e.Seq) }
func (StopDone) String() string     { return "StopDone" }
func (DeleteDone) String() string   { return "DeleteDone" }

func (e SessionLost) failure() (Reason, string)    { return ReasonSessionLost, e.Detail }
func (e SupervisorLost) failure() (Reason, string) { return ReasonSupervisorLost, e.Detail }
func (e StartFailed) failure() (Reason, string)    { return ReasonStartFailed, e.Detail }
func (e BoundaryFailed) failure() (Reason, string) { return ReasonBoundaryFailed, e.Detail }
func (e NodeLost) failure() (Reason, string)       { return ReasonNodeLost, e.Detail }

func failureString(e failureEvent) string {
	r, d := e.failure()
	return fmt.Sprintf("%s(%s)", r, d)
}
