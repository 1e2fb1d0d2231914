package supervise

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

func TestKind(t *testing.T) {
	for id, want := range map[string]string{
		"boundary/proxy/conn/17": "conn", "boundary/proxy": "proxy", "boundary": "boundary", "7": "unknown",
	} {
		if got := Kind(actor.NewPID("local", id)); got != want {
			t.Errorf("Kind(%q) = %q, want %q", id, got, want)
		}
	}
}

type boom struct{}

// panicky panics on every boom; it counts its starts.
type panicky struct{ starts *atomic.Int32 }

func (p *panicky) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		p.starts.Add(1)
	case boom:
		panic("boom")
	}
}

// parent spawns one panicky child named "leaf/1".
type parent struct {
	child  *actor.PID
	starts *atomic.Int32
}

func (p *parent) Receive(c actor.Context) {
	if _, ok := c.Message().(*actor.Started); ok {
		p.child, _ = c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &panicky{starts: p.starts} }), "leaf/1")
	}
}

func TestStrategyRestartsWithinBudgetThenStops(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	var gaveUp atomic.Int32
	counters := NewCounters()
	s := OneForOne(2, time.Minute, RestartOnFailure, WithCounters(counters),
		WithOnGiveUp(func(*actor.PID, any) { gaveUp.Add(1) }))
	starts := &atomic.Int32{}
	p := &parent{starts: starts}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return p }, actor.WithSupervisor(s)), "sup-test")
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Root.Stop(pid)
	waitFor(t, func() bool { return starts.Load() == 1 })
	child := actor.NewPID(sys.Address(), "sup-test/leaf/1")
	for i := 0; i < 3; i++ {
		sys.Root.Send(child, boom{})
		want := int64(i + 1)
		waitFor(t, func() bool {
			return counters.Get("leaf", actor.RestartDirective)+counters.Get("leaf", actor.StopDirective) == want
		})
	}
	if r, s := counters.Get("leaf", actor.RestartDirective), counters.Get("leaf", actor.StopDirective); r != 2 || s != 1 {
		t.Fatalf("restarts %d stops %d, want 2 and 1 (budget of 2)", r, s)
	}
	// The counters move before onGiveUp is called (HandleFailure counts,
	// logs, stops the child, then tells): wait for the call.
	waitFor(t, func() bool { return gaveUp.Load() >= 1 })
	if gaveUp.Load() != 1 {
		t.Fatalf("onGiveUp ran %d times, want 1", gaveUp.Load())
	}
	if starts.Load() != 3 {
		t.Fatalf("child started %d times, want 3 (first + 2 restarts)", starts.Load())
	}
}

func TestStopOnFailureNeverRestarts(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	counters := NewCounters()
	starts := &atomic.Int32{}
	p := &parent{starts: starts}
	pid, _ := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return p },
		actor.WithSupervisor(OneForOne(0, 0, StopOnFailure, WithCounters(counters)))), "stop-test")
	defer sys.Root.Stop(pid)
	waitFor(t, func() bool { return starts.Load() == 1 })
	sys.Root.Send(actor.NewPID(sys.Address(), "stop-test/leaf/1"), boom{})
	waitFor(t, func() bool { return counters.Get("leaf", actor.StopDirective) == 1 })
	if starts.Load() != 1 || counters.Get("leaf", actor.RestartDirective) != 0 {
		t.Fatalf("a stopped leaf restarted: starts %d", starts.Load())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
