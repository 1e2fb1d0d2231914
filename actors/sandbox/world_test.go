package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

// world is the sandboxes actor in-process on its seams: the real bbolt
// store (with a fault set at its write point), the fake driver and the
// fake clock. No root, no processes.
type world struct {
	t      *testing.T
	sys    *actor.ActorSystem
	env    *Env
	st     *store.Store
	faults *fault.Set
	drv    *sandboxtest.Driver
	clock  *clock.Fake
	boxes  *actor.PID
	log    *testenv.Buffer
	// policies counts SetPolicy pushes the fake supervisor session got.
	policies chan *messages.SetPolicy
	// clients are the client records (the Clients seam).
	clients *sandboxtest.Clients
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	faults := fault.NewSet()
	st, err := store.Open(dir+"/state.db", store.WithFaults(faults))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, st: st, faults: faults, drv: sandboxtest.NewDriver(dir + "/sandboxes"),
		clock: clock.NewFake(time.Now()), log: &testenv.Buffer{}, policies: make(chan *messages.SetPolicy, 16),
		clients: sandboxtest.NewClients()}
	w.sys = actor.NewActorSystem()
	w.env = &Env{Store: st, Driver: w.drv, Clock: w.clock, StateDir: dir,
		Lifecycle: lifecycle.Config{Grace: 20 * time.Second, StartTimeout: 30 * time.Second, StableAfter: 30 * time.Second},
		Log:       zerolog.New(w.log), Counters: supervise.NewCounters(), RelayAddr: "127.0.0.1:1", Clients: w.clients}
	w.boxes = w.spawnBoxes()
	// The supervisors' session actor (every Hello names it): it takes
	// policy pushes and confirms them.
	_, err = w.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*messages.SetPolicy); ok {
			w.policies <- m
			c.Respond(&messages.Reply{Status: messages.Status_STATUS_OK})
		}
	}), "session")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = w.sys.Root.StopFuture(w.boxes).Wait()
		w.sys.Shutdown()
		_ = st.Close()
		if t.Failed() {
			t.Logf("actor log:\n%s", w.log)
		}
	})
	return w
}

func (w *world) spawnBoxes() *actor.PID {
	pid, err := w.sys.Root.SpawnNamed(Props(w.env), "sandboxes")
	if err != nil {
		w.t.Fatal(err)
	}
	return pid
}

// restartGateway stops the sandboxes actor (as a gateway shutdown does)
// and starts a new one on the same store, driver and clock.
func (w *world) restartGateway() {
	w.t.Helper()
	if err := w.sys.Root.StopFuture(w.boxes).Wait(); err != nil {
		w.t.Fatal(err)
	}
	w.boxes = w.spawnBoxes()
}

func (w *world) ask(msg any) *messages.Reply {
	w.t.Helper()
	res, err := w.sys.Root.RequestFuture(w.boxes, msg, 5*time.Second).Result()
	if err != nil {
		w.t.Fatalf("%T: no answer: %v (the actor blocked?)", msg, err)
	}
	r, ok := res.(*messages.Reply)
	if !ok {
		w.t.Fatalf("%T: answered %T", msg, res)
	}
	return r
}

func (w *world) create(name string) *messages.Reply {
	w.t.Helper()
	return w.ask(&messages.CreateRequest{Name: name, Policy: []byte("version: 1\n")})
}

func (w *world) verb(name string, v messages.Verb) *messages.Reply {
	w.t.Helper()
	return w.ask(&messages.SandboxRequest{Name: name, Verb: v})
}

func (w *world) get(name string) *messages.Reply {
	w.t.Helper()
	return w.verb(name, messages.Verb_VERB_GET)
}

func (w *world) phase(name string) string {
	w.t.Helper()
	r := w.get(name)
	if r.Status != messages.Status_STATUS_OK {
		return r.Status.String()
	}
	return r.Sandbox.Phase
}

// waitPhase polls get until the sandbox is in phase (5 s).
func (w *world) waitPhase(name, phase string) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := w.phase(name)
		if got == phase {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("sandbox %s is %s, want %s", name, got, phase)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFor polls cond (5 s).
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proc is the newest supervisor of name (it must exist).
func (w *world) proc(name string) *sandboxtest.Proc {
	w.t.Helper()
	var ps []*sandboxtest.Proc
	w.waitFor("a supervisor of "+name, func() bool { ps = w.drv.Procs(name); return len(ps) > 0 })
	return ps[len(ps)-1]
}

// hello plays the newest supervisor of name saying Hello.
func (w *world) hello(name string) *messages.HelloAck {
	w.t.Helper()
	p := w.proc(name)
	res, err := w.sys.Root.RequestFuture(w.boxes, &messages.Hello{Sandbox: name, Instance: p.Instance,
		Supervisor: actor.NewPID(w.sys.Address(), "session"), SupervisorPid: int32(p.Pid()), WorkloadPid: 7}, 5*time.Second).Result()
	if err != nil {
		w.t.Fatalf("hello %s: %v", name, err)
	}
	return res.(*messages.HelloAck)
}

// ready creates name and brings it to Ready.
func (w *world) ready(name string) {
	w.t.Helper()
	if r := w.create(name); r.Status != messages.Status_STATUS_OK {
		w.t.Fatalf("create %s: %v", name, r)
	}
	if ack := w.hello(name); ack.Status != messages.Status_STATUS_OK {
		w.t.Fatalf("hello %s: %v", name, ack)
	}
	w.waitPhase(name, "Ready")
}

// sandboxPID is the actor of sandbox name.
func (w *world) sandboxPID(name string) *actor.PID {
	return actor.NewPID(w.sys.Address(), "sandboxes/sandbox/"+name)
}

// record reads name's record from the store.
func (w *world) record(name string) (store.Record, error) {
	return w.st.Get(context.Background(), name)
}

func (w *world) mustRecord(name string) store.Record {
	w.t.Helper()
	rec, err := w.record(name)
	if err != nil {
		w.t.Fatalf("record %s: %v", name, err)
	}
	return rec
}

// failNextWrite arms one failing store write.
func (w *world) failNextWrite() {
	w.faults.Arm(store.PointWrite, fault.Rule{Kind: fault.KindError, Count: 1})
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
