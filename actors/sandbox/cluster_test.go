package sandbox

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/transport"
)

// restartInCluster stops the sandboxes actor, makes this node a cluster
// node with c, and starts a new sandboxes actor (the env changes only
// while no actor reads it).
func (w *world) restartInCluster(c Cluster) {
	w.t.Helper()
	if err := w.sys.Root.StopFuture(w.boxes).Wait(); err != nil {
		w.t.Fatal(err)
	}
	w.env.Cluster = c
	w.boxes = w.spawnBoxes()
}

// elsewhere is a Cluster seam where every sandbox exists and is owned by
// node n2 (whose API is at ownerAddr) until moved says otherwise.
type elsewhere struct{ moved *atomic.Bool }

const ownerAddr = "n2:1"

func (elsewhere) Self() string                  { return "n1" }
func (elsewhere) Owns(string) bool              { return false }
func (elsewhere) Owned() []string               { return nil }
func (elsewhere) Place(string) (string, string) { return "n2", ownerAddr }
func (elsewhere) Gateways() []string            { return []string{ownerAddr} }
func (elsewhere) List() []Location              { return nil }
func (e elsewhere) Locate(name string) Location {
	rec := store.Record{}
	rec.Spec.Name = name
	if e.moved.Load() {
		return Location{Record: rec, Exists: true, OwnerNode: "n3", OwnerAPI: "n3:1", HostAlive: true}
	}
	return Location{Record: rec, Exists: true, OwnerNode: "n2", OwnerAPI: ownerAddr, HostAlive: true}
}

// lossyOwner is node n2's API actor: it counts what reaches it and drops
// the first request of each type (its answer lost in transit), answering
// the later ones.
type lossyOwner struct {
	mu   sync.Mutex
	seen map[string]int
}

func (o *lossyOwner) Receive(ctx actor.Context) {
	var kind string
	switch m := ctx.Message().(type) {
	case *messages.RelayRequest:
		kind = "relay"
	case *messages.SandboxRequest:
		kind = m.Verb.String()
	default:
		return
	}
	o.mu.Lock()
	o.seen[kind]++
	n := o.seen[kind]
	o.mu.Unlock()
	if n > 1 {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, RelayAddr: "relay:1"})
	}
}

func (o *lossyOwner) count(kind string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[kind]
}

// TestRelayRetriesIdempotent: a node relays requests for a sandbox another
// node owns; the owner's first answer is lost. A request safe to repeat
// (a relay's tokens) is asked again and answered; one that is not (a
// delete) is sent once, never repeated behind the caller's back.
func TestRelayRetriesIdempotent(t *testing.T) {
	w := newWorld(t)
	owner := &lossyOwner{seen: map[string]int{}}
	local, err := w.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return owner }), "n2-api")
	if err != nil {
		t.Fatal(err)
	}
	w.sys.ProcessRegistry.RegisterAddressResolver(func(pid *actor.PID) (actor.Process, bool) {
		if pid.Address == ownerAddr && pid.Id == transport.APIActor {
			return w.sys.ProcessRegistry.Get(local)
		}
		return nil, false
	})
	moved := &atomic.Bool{}
	w.restartInCluster(elsewhere{moved: moved})

	start := time.Now()
	res, err := w.sys.Root.RequestFuture(w.boxes, &messages.RelayRequest{Name: "a"}, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("relay request: no answer: %v", err)
	}
	if r := res.(*messages.Reply); r.Status != messages.Status_STATUS_OK || r.RelayAddr != "relay:1" {
		t.Fatalf("relay request answered %v, want the owner's OK", r)
	}
	if n := owner.count("relay"); n != 2 {
		t.Fatalf("the owner got the relay request %d times, want 2", n)
	}
	t.Logf("answered after %s (one lost answer, asked again)", time.Since(start).Round(time.Millisecond))

	f := actor.NewFuture(w.sys, time.Minute)
	w.sys.Root.RequestWithCustomSender(w.boxes, &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_DELETE}, f.PID())
	time.Sleep(2*relayRetry + 500*time.Millisecond) // past two retry points
	if n := owner.count(messages.Verb_VERB_DELETE.String()); n != 1 {
		t.Fatalf("the owner got the delete %d times, want exactly 1", n)
	}

	// The owner loses the sandbox while the delete waits: the caller is
	// told at once, not after relayTimeout.
	moved.Store(true)
	res, err = f.Result()
	if err != nil {
		t.Fatalf("delete: no answer after the owner changed: %v", err)
	}
	r := res.(*messages.Reply)
	if r.Status != messages.Status_STATUS_UNAVAILABLE || !strings.Contains(r.Message, "owner changed from node n2 to n3") {
		t.Fatalf("delete answered %v, want Unavailable naming the owner change", r)
	}
}

// ownedHere is a Cluster seam where this node (n1) owns sandbox "a" until
// lost is set; then n2 owns it.
type ownedHere struct {
	elsewhere
	lost *atomic.Bool
}

func (o ownedHere) Owns(name string) bool { return name == "a" && !o.lost.Load() }
func (o ownedHere) Owned() []string {
	if o.lost.Load() {
		return nil
	}
	return []string{"a"}
}
func (o ownedHere) Locate(name string) Location {
	l := o.elsewhere.Locate(name)
	if !o.lost.Load() {
		l.OwnerNode, l.OwnerAPI = "n1", "n1:1"
	}
	return l
}

// TestDisownAnswersQueued: a node loses a sandbox while requests for it
// wait in its actor's mailbox (the actor is busy with a slow store write);
// every one of them is answered before the actor stops, none is dropped.
func TestDisownAnswersQueued(t *testing.T) {
	w := newWorld(t)
	w.ready("a")
	lost := &atomic.Bool{}
	w.restartInCluster(ownedHere{elsewhere: elsewhere{moved: &atomic.Bool{}}, lost: lost})
	w.waitFor("the node's actor drives a again", func() bool { return w.get("a").Status == messages.Status_STATUS_OK })

	// A stop whose write takes a second keeps the actor busy; gets queue
	// behind it, then the node loses the sandbox.
	w.faults.Arm(store.PointWrite, fault.Rule{Kind: fault.KindDelay, Delay: time.Second, Count: 1})
	stop := w.sys.Root.RequestFuture(w.boxes, &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_STOP}, 10*time.Second)
	time.Sleep(100 * time.Millisecond) // the stop is in its write
	var gets []*actor.Future
	for range 5 {
		gets = append(gets, w.sys.Root.RequestFuture(w.boxes, &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_GET}, 10*time.Second))
	}
	// The parent handles messages in order: once it answered this list, it
	// has routed every get to the busy actor.
	if _, err := w.sys.Root.RequestFuture(w.boxes, &messages.ListRequest{}, 5*time.Second).Result(); err != nil {
		t.Fatal(err)
	}
	lost.Store(true)
	w.sys.Root.Send(w.boxes, &Ownership{Kind: Disown, Sandbox: "a"})

	if _, err := stop.Result(); err != nil {
		t.Fatalf("the stop queued before the disown got no answer: %v", err)
	}
	for i, f := range gets {
		res, err := f.Result()
		if err != nil {
			t.Fatalf("get %d, queued before the disown, got no answer: %v", i, err)
		}
		if r := res.(*messages.Reply); r.Status != messages.Status_STATUS_OK || r.Sandbox.GetName() != "a" {
			t.Fatalf("get %d answered %v, want the actor's status of a", i, r)
		}
	}
	w.waitFor("the disowned actor stops", func() bool {
		_, err := w.sys.Root.RequestFuture(w.sandboxPID("a"), &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_GET}, 200*time.Millisecond).Result()
		return err != nil
	})
}
