package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
)

// TestAPISupervised: the API actor is the root's child like its siblings.
// A panic in it is logged with its stack, counted, and the actor restarted
// (the next request is served); ten failures within ten seconds make the
// gateway give up.
func TestAPISupervised(t *testing.T) {
	logs := &testenv.Buffer{}
	log := zerolog.New(logs)
	counters := supervise.NewCounters()
	faults := fault.NewSet()
	gaveUp := make(chan string, 1)
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	// A stand-in for the sandboxes actor: it answers list.
	sandboxes := actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*messages.ListRequest); ok {
			c.Respond(&messages.Reply{Status: messages.Status_STATUS_OK})
		}
	})
	root, err := sys.Root.SpawnNamed(treeProps(log, counters, gaveUp, []child{
		{"sandboxes", sandboxes},
		{"api", apiProps(&apiActor{log: log, faults: faults, sandboxes: actor.NewPID(sys.Address(), "gateway/sandboxes")})},
	}), "gateway")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Root.RequestFuture(root, &rootReady{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	api := actor.NewPID(sys.Address(), "gateway/api")
	list := func(timeout time.Duration) error {
		_, err := sys.Root.RequestFuture(api, &messages.ListRequest{}, timeout).Result()
		return err
	}
	if err := list(5 * time.Second); err != nil {
		t.Fatalf("list before any fault: %v", err)
	}

	faults.Arm(fault.APIRequest, fault.Rule{Kind: fault.KindPanic, Count: 1})
	if err := list(300 * time.Millisecond); err == nil {
		t.Fatal("the request that made the API panic was answered")
	}
	if err := list(5 * time.Second); err != nil {
		t.Fatalf("list after the API's restart: %v", err)
	}
	if n := counters.Get("api", actor.RestartDirective); n != 1 {
		t.Fatalf("api restarts counted: %d, want 1 (%s)", n, counters)
	}
	if l := logs.String(); !strings.Contains(l, "api") || !strings.Contains(l, "injected panic at api.request") || !strings.Contains(l, "goroutine") {
		t.Fatalf("the panic is not logged with its stack:\n%s", l)
	}
	select {
	case why := <-gaveUp:
		t.Fatalf("gave up after one failure: %s", why)
	default:
	}

	// It keeps failing: the gateway gives up (Run returns that error).
	faults.Arm(fault.APIRequest, fault.Rule{Kind: fault.KindPanic})
	deadline := time.Now().Add(9 * time.Second)
	for {
		_ = list(50 * time.Millisecond)
		select {
		case why := <-gaveUp:
			if !strings.Contains(why, "gateway/api failed 10 times in 10s") {
				t.Fatalf("give-up reason %q", why)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no give-up after %d api restarts", counters.Get("api", actor.RestartDirective))
		}
	}
}
