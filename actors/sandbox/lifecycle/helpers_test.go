package lifecycle

import (
	"math/rand/v2"
	"testing"
	"time"
)

// testClock is a manual Clock (the documented seam).
type testClock struct{ now time.Time }

func (c *testClock) Now() time.Time          { return c.now }
func (c *testClock) advance(d time.Duration) { c.now = c.now.Add(d) }

// Who the tests' steps are by: verbs a client's, events the gateway's.
const (
	testClient  = "client:tester"
	testGateway = "gateway:test"
)

// fireTimer, as a step, fires the machine's current timer.
type fireTimer struct{}

func newTestMachine(cfg Config) (*Machine, *testClock) {
	c := &testClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return New(cfg, WithClock(c), WithRand(rand.New(rand.NewPCG(7, 11)))), c
}

// do runs one step: a Verb, an Event, or fireTimer (which first advances
// the clock to the timer's deadline).
func do(m *Machine, c *testClock, s any) (Transition, error) {
	switch s := s.(type) {
	case Verb:
		return m.Apply(s, testClient)
	case Event:
		return m.On(s, testGateway)
	case fireTimer:
		if m.timer.At.After(c.now) {
			c.now = m.timer.At
		}
		return m.On(TimerFired{Seq: m.timer.Seq}, testGateway)
	}
	panic("bad step")
}

// drive runs steps that must all succeed and returns the last Transition.
func drive(t *testing.T, m *Machine, c *testClock, steps ...any) Transition {
	t.Helper()
	var tr Transition
	for i, s := range steps {
		var err error
		if tr, err = do(m, c, s); err != nil {
			t.Fatalf("step %d (%v) from %s: %v", i, s, m.Phase(), err)
		}
	}
	return tr
}

// pathTo returns the steps (from New) that reach phase p, and the restart
// policy to use. Error is reached with restart: never and a failing
// workload, so it stays in Error.
func pathTo(p Phase) (RestartPolicy, []any) {
	ready := []any{VerbCreate, SessionUp{}}
	switch p {
	case PhaseProvisioning:
		return RestartOnFailure, []any{VerbCreate}
	case PhaseReady:
		return RestartOnFailure, ready
	case PhaseStopping:
		return RestartOnFailure, append(ready, VerbStop)
	case PhaseStopped:
		return RestartOnFailure, append(ready, VerbStop, StopDone{})
	case PhaseCompleted:
		return RestartOnFailure, append(ready, WorkloadExited{Code: 0})
	case PhaseError:
		return RestartNever, append(ready, WorkloadExited{Code: 1})
	case PhaseRecovering:
		return RestartOnFailure, append(ready, SupervisorLost{Detail: "killed"})
	case PhaseDeleting:
		return RestartOnFailure, append(ready, VerbDelete)
	}
	panic("no path to " + p.String())
}

func machineIn(t *testing.T, p Phase) (*Machine, *testClock) {
	t.Helper()
	restart, steps := pathTo(p)
	m, c := newTestMachine(Config{Restart: restart})
	drive(t, m, c, steps...)
	if m.Phase() != p {
		t.Fatalf("setup: want %s, got %s", p, m.Phase())
	}
	return m, c
}
