package sandbox

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

// Messages local to the gateway process (protobufs from clients and
// supervisors are forwarded as they are). Work done off the actor (stops,
// waits, file removal) reports back with one of these.
type (
	// create starts a new sandbox actor's life; reply goes to respondTo.
	create struct {
		spec      store.Spec
		respondTo *actor.PID
	}
	// statusUpdate is pushed by a sandbox actor to its parent after every
	// step, so list answers from a cache without asking every child.
	statusUpdate struct {
		status *messages.SandboxStatus
	}
	// timerFired delivers a lifecycle timer.
	timerFired struct{ seq uint64 }
	// supervisorExited reports that a supervisor process ended.
	supervisorExited struct {
		instance string
		proc     driver.Proc
		detail   string
		// cannotStart: its Err wraps driver.ErrCannotStart (a start
		// that a retry cannot heal).
		cannotStart bool
	}
	// previousStopped: the supervisor a spawn replaces is gone (err: it
	// did not die in time).
	previousStopped struct {
		proc driver.Proc
		err  error
	}
	// deleted tells the parent a sandbox actor is done and stopping.
	deleted struct {
		name string
		pid  *actor.PID
	}
	// forgotten: the parent no longer routes to a sandbox actor (its
	// sandbox deleted, or owned by another node now), which stops when it
	// gets this: after every request the parent routed to it before, so
	// none is dropped unanswered.
	forgotten struct{}
	// actionDone reports a stop, kill or delete carried out off the actor.
	actionDone struct {
		seq uint64
		err error
	}
	// retryRecordDelete retries removing a deleted sandbox's record.
	retryRecordDelete struct{}
)
