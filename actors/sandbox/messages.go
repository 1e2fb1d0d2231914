package sandbox

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

// Messages local to the gateway process (protobufs from clients and
// supervisors are forwarded as they are).
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
		detail   string
	}
	// deleted tells the parent a sandbox actor is done and stopping.
	deleted struct {
		name string
		pid  *actor.PID
	}
	// actionDone reports a stop, kill or delete carried out off the actor.
	actionDone struct {
		instance string
		err      error
	}
)
