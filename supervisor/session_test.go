package supervisor

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// TestSessionCommands: the session actor takes a FaultRequest only when
// the gateway runs --chaos, and commands only from a gateway node (a
// remote caller of another role is refused, nothing armed).
func TestSessionCommands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chaos  bool
		peer   string // the transport's stamp; "" for a local sender
		status messages.Status
	}{
		{"no chaos", false, "gateway:local", messages.Status_STATUS_INVALID},
		{"chaos, from the gateway", true, "gateway:local", messages.Status_STATUS_OK},
		{"chaos, from a client", true, "client:eve", messages.Status_STATUS_UNAUTHENTICATED},
		{"chaos, from another supervisor", true, "supervisor:b", messages.Status_STATUS_UNAUTHENTICATED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := actor.NewActorSystem()
			defer sys.Shutdown()
			faults := fault.NewSet()
			s := &session{log: zerolog.Nop(), api: actor.NewPID("nowhere:1", transport.HelloActor), chaos: tc.chaos, faults: faults,
				hello: &messages.Hello{Sandbox: "a"}, restarts: func() map[string]int64 { return nil }}
			pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
			if err != nil {
				t.Fatal(err)
			}
			var headers map[string]string
			if tc.peer != "" {
				headers = map[string]string{transport.PeerHeader: tc.peer}
			}
			// As the transport delivers a remote message: an envelope with
			// the peer's identity in its header.
			f := actor.NewFuture(sys, 5*time.Second)
			sys.Root.Send(pid, &actor.MessageEnvelope{Header: headers, Message: &messages.FaultRequest{Name: "a", Rule: "identity.lookup=error:1"}, Sender: f.PID()})
			res, err := f.Result()
			if err != nil {
				t.Fatal(err)
			}
			r, ok := res.(*messages.Reply)
			if !ok || r.Status != tc.status {
				t.Fatalf("reply %v, want status %s", res, tc.status)
			}
			armed := faults.Inject(fault.IdentityLookup) != nil
			if armed != (tc.status == messages.Status_STATUS_OK) {
				t.Fatalf("fault armed: %v after reply %s", armed, r.Status)
			}
		})
	}
}

// TestSessionCommandsForAnotherSandbox: a command that names another
// sandbox or instance is refused (the gateway sends to the session address
// a Hello named; a wrong one must not change this supervisor).
func TestSessionCommandsForAnotherSandbox(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	faults := fault.NewSet()
	s := &session{log: zerolog.Nop(), api: actor.NewPID("nowhere:1", transport.HelloActor), chaos: true, faults: faults,
		hello: &messages.Hello{Sandbox: "a", Instance: "i1"}, restarts: func() map[string]int64 { return nil }}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
	if err != nil {
		t.Fatal(err)
	}
	gw := map[string]string{transport.PeerHeader: "gateway:local"}
	for _, msg := range []any{
		&messages.FaultRequest{Name: "b", Rule: "identity.lookup=error:1"},
		&messages.SetPolicy{Sandbox: "b", Instance: "i1", Policy: []byte("version: 1\n"), Version: 9},
		&messages.SetPolicy{Sandbox: "a", Instance: "i0", Policy: []byte("version: 1\n"), Version: 9},
	} {
		f := actor.NewFuture(sys, 5*time.Second)
		sys.Root.Send(pid, &actor.MessageEnvelope{Header: gw, Message: msg, Sender: f.PID()})
		res, err := f.Result()
		if r, ok := res.(*messages.Reply); err != nil || !ok || r.Status != messages.Status_STATUS_INVALID {
			t.Fatalf("%T %v: reply %v %v, want INVALID", msg, msg, res, err)
		}
	}
	if faults.Inject(fault.IdentityLookup) != nil {
		t.Fatal("a fault for sandbox b was armed in a's supervisor")
	}
}
