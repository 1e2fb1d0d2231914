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
