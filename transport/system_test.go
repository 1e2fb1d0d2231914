package transport_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// TestStaleReplyAfterRestart: a process restarts on its address (a
// gateway node after a SIGKILL); a reply its peer queued for the old
// incarnation's future arrives at the new one, which delivers by id as
// the transport does. It must not complete the new incarnation's own
// request. The control shows the hazard with protoactor's plain system
// (both incarnations hand out the same ids).
func TestStaleReplyAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		newSystem func() *actor.ActorSystem
		wantStale bool
	}{
		{"protoactor's ids (control)", func() *actor.ActorSystem { return quiet() }, true},
		{"transport.NewActorSystem", func() *actor.ActorSystem { return transport.NewActorSystem(quietOption()) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.newSystem()
			stale := actor.NewFuture(old, time.Minute).PID().Id // the old incarnation's request
			old.Shutdown()

			cur := tc.newSystem()
			defer cur.Shutdown()
			mine := actor.NewFuture(cur, 500*time.Millisecond)
			// The peer's queued answer to the old request, delivered by id.
			cur.Root.Send(actor.NewPID(cur.Address(), stale), &messages.Reply{Message: "stale"})
			res, err := mine.Result()
			gotStale := err == nil && res.(*messages.Reply).GetMessage() == "stale"
			if gotStale != tc.wantStale {
				t.Fatalf("new request completed by the stale reply: %v (want %v); result %v, %v", gotStale, tc.wantStale, res, err)
			}
		})
	}
}
