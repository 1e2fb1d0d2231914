package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

// TestFailedWriteThenDelete is the review's bug: a delete whose write
// fails answers an error naming the cause and changes nothing (phase,
// record, supervisor); the same delete retried works, the supervisor is
// stopped and the files removed.
func TestFailedWriteThenDelete(t *testing.T) {
	w := newWorld(t)
	w.ready("a")
	before := w.mustRecord("a")
	w.failNextWrite()
	r := w.verb("a", messages.Verb_VERB_DELETE)
	if r.Status != messages.Status_STATUS_UNAVAILABLE || !contains(r.Message, "delete not done") || !contains(r.Message, "injected fault") || !contains(r.Message, "retry") {
		t.Fatalf("delete with a failing write: %v", r)
	}
	if after := w.mustRecord("a"); after.Revision != before.Revision || after.Lifecycle.Phase != lifecycle.PhaseReady || after.Intent != store.IntentRunning {
		t.Fatalf("the failed delete changed the record: %+v", after.Lifecycle)
	}
	if got := w.phase("a"); got != "Ready" {
		t.Fatalf("phase %s after the failed delete", got)
	}
	if len(w.drv.Live("a")) != 1 {
		t.Fatal("the failed delete stopped the supervisor")
	}
	if r := w.verb("a", messages.Verb_VERB_DELETE); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("delete retried: %v", r)
	}
	w.carriedOut("a", lifecycle.VerbDelete)
}

// TestStoreFailureAtEachWritePoint fails the store's write once at each
// point a sandbox writes, and checks that nothing is lost and the next
// try works.
func TestStoreFailureAtEachWritePoint(t *testing.T) {
	w := newWorld(t)

	// create: refused with the cause, no record, the name stays free.
	w.failNextWrite()
	if r := w.create("c"); r.Status != messages.Status_STATUS_UNAVAILABLE || !contains(r.Message, "injected fault") {
		t.Fatalf("create with a failing write: %v", r)
	}
	if _, err := w.record("c"); !isNotFound(err) {
		t.Fatalf("a failed create left a record: %v", err)
	}
	w.waitPhase("c", "STATUS_NOT_FOUND")
	w.ready("c")

	// Every verb: Unavailable, nothing changed, then the retry works.
	for _, v := range []messages.Verb{messages.Verb_VERB_STOP, messages.Verb_VERB_START, messages.Verb_VERB_STOP_FORCE, messages.Verb_VERB_RECOVER} {
		ph := w.phase("c")
		before := w.mustRecord("c")
		w.failNextWrite()
		r := w.verb("c", v)
		if r.Status != messages.Status_STATUS_UNAVAILABLE && r.Status != messages.Status_STATUS_REFUSED {
			t.Fatalf("%s with a failing write in %s: %v", v, ph, r)
		}
		if r.Status == messages.Status_STATUS_REFUSED {
			w.faults.Disarm(store.PointWrite)
			continue // this phase does not take it: nothing was written
		}
		if after := w.mustRecord("c"); after.Revision != before.Revision {
			t.Fatalf("%s: a failed write moved the record from revision %d to %d", v, before.Revision, after.Revision)
		}
		if got := w.phase("c"); got != ph {
			t.Fatalf("%s: phase %s after a failed write, want %s", v, got, ph)
		}
		if r := w.verb("c", v); r.Status != messages.Status_STATUS_OK {
			t.Fatalf("%s retried: %v", v, r)
		}
		settle(w, "c")
	}

	// policy set: the version stays, the retry sets it.
	v0 := w.mustRecord("c").Spec.PolicyVersion
	w.failNextWrite()
	if r := w.ask(&messages.PolicyRequest{Name: "c", Policy: []byte("version: 1\n")}); r.Status != messages.Status_STATUS_UNAVAILABLE || !contains(r.Message, "policy not set") {
		t.Fatalf("policy set with a failing write: %v", r)
	}
	if got := w.mustRecord("c").Spec.PolicyVersion; got != v0 {
		t.Fatalf("policy version %d after a failed set, want %d", got, v0)
	}
	if r := w.ask(&messages.PolicyRequest{Name: "c", Policy: []byte("version: 1\n")}); r.Status != messages.Status_STATUS_OK || r.PolicyVersion != v0+1 {
		t.Fatalf("policy set retried: %v", r)
	}

	// The record's removal at the end of a delete: retried on the clock.
	fired := w.faults.Fired(store.PointWrite)
	w.faults.Arm(store.PointWrite, fault.Rule{Kind: fault.KindError, Count: 1, Skip: 1}) // the verb's write works, the removal fails
	if r := w.verb("c", messages.Verb_VERB_DELETE); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("delete: %v", r)
	}
	w.waitFor("a failed removal retried later", func() bool { return w.clock.Pending() > 0 && w.faults.Fired(store.PointWrite) == fired+1 })
	if _, err := w.record("c"); err != nil {
		t.Fatalf("the record went despite the failed write: %v", err)
	}
	if got := w.phase("c"); got != "Deleting" {
		t.Fatalf("phase %s while the removal waits, want Deleting", got)
	}
	w.clock.Advance(time.Minute)
	w.waitPhase("c", "STATUS_NOT_FOUND")
	if _, err := w.record("c"); !isNotFound(err) {
		t.Fatalf("record after the retried removal: %v", err)
	}
}

// settle waits until a sandbox is out of the phases a verb passes through
// (bringing it to Ready when a supervisor waits for its Hello).
func settle(w *world, name string) {
	w.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		switch w.phase(name) {
		case "Ready", "Stopped", "Error":
			return
		case "Provisioning", "Recovering":
			if live := w.drv.Live(name); len(live) == 1 {
				w.hello(name)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.t.Fatalf("sandbox %s did not settle: %s", name, w.phase(name))
}

// TestStaleTimerAfterStop: a recovery timer armed before a stop fires
// after it, and changes nothing (no spawn, no write).
func TestStaleTimerAfterStop(t *testing.T) {
	w := newWorld(t)
	w.ready("s")
	w.proc("s").Exit(errors.New("supervisor exited: signal: killed"))
	w.waitPhase("s", "Recovering")
	if r := w.verb("s", messages.Verb_VERB_STOP); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("stop: %v", r)
	}
	w.waitPhase("s", "Stopped")
	rev, procs := w.mustRecord("s").Revision, len(w.drv.Procs("s"))
	w.clock.Advance(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if got := w.phase("s"); got != "Stopped" || len(w.drv.Procs("s")) != procs || w.mustRecord("s").Revision != rev {
		t.Fatalf("a stale timer acted: phase %s, %d supervisors (was %d), revision %d (was %d)", got, len(w.drv.Procs("s")), procs, w.mustRecord("s").Revision, rev)
	}
}

// TestSameNameSuccessor: delete then create the same name at once, many
// times: every create works (waiting for the predecessor's actor id), the
// new sandbox has a new uid, and the old supervisor's late exit does not
// touch it.
func TestSameNameSuccessor(t *testing.T) {
	w := newWorld(t)
	w.ready("n")
	uids := map[string]bool{w.mustRecord("n").Spec.UID: true}
	for i := 0; i < 20; i++ {
		old, n := w.proc("n"), len(w.drv.Procs("n"))
		if r := w.verb("n", messages.Verb_VERB_DELETE); r.Status != messages.Status_STATUS_OK {
			t.Fatalf("round %d: delete: %v", i, r)
		}
		// No wait: the create races the predecessor's end.
		var r *messages.Reply
		for {
			r = w.create("n")
			if r.Status != messages.Status_STATUS_REFUSED || !contains(r.Message, "already exists") {
				break
			}
			if !contains(r.Message, "phase Deleting") {
				t.Fatalf("round %d: create right after delete: %q, want the phase Deleting named", i, r.Message)
			}
			time.Sleep(time.Millisecond)
		}
		if r.Status != messages.Status_STATUS_OK {
			t.Fatalf("round %d: create after delete: %v", i, r)
		}
		uid := w.mustRecord("n").Spec.UID
		if uids[uid] || uid == "" {
			t.Fatalf("round %d: uid %q reused", i, uid)
		}
		uids[uid] = true
		w.waitFor("the new sandbox's supervisor", func() bool { return len(w.drv.Procs("n")) == n+1 })
		old.Exit(errors.New("late exit of the deleted sandbox's supervisor"))
		if ack := w.hello("n"); ack.Status != messages.Status_STATUS_OK {
			t.Fatalf("round %d: hello: %v", i, ack)
		}
		w.waitPhase("n", "Ready")
	}
}

// TestDeletedThenGet: requests that reach a sandbox while its delete
// completes are all answered (NotFound once gone), never dropped.
func TestDeletedThenGet(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 20; i++ {
		name := fmt.Sprintf("g%d", i)
		w.ready(name)
		futures := w.sys.Root.RequestFuture(w.boxes, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_DELETE}, 5*time.Second)
		for j := 0; j < 50; j++ {
			r := w.get(name) // fails the test if unanswered
			if r.Status != messages.Status_STATUS_OK && r.Status != messages.Status_STATUS_NOT_FOUND {
				t.Fatalf("get while deleting: %v", r)
			}
		}
		if _, err := futures.Result(); err != nil {
			t.Fatal(err)
		}
		w.waitPhase(name, "STATUS_NOT_FOUND")
	}
}

// TestStopRunsOffTheActor: a supervisor that ignores its stop does not
// block the actor: get answers at once; the stop ends when it exits.
func TestStopRunsOffTheActor(t *testing.T) {
	w := newWorld(t)
	w.drv.HoldStops(true)
	w.ready("h")
	if r := w.verb("h", messages.Verb_VERB_STOP); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("stop: %v", r)
	}
	for i := 0; i < 20; i++ {
		start := time.Now()
		if got := w.phase("h"); got != "Stopping" {
			t.Fatalf("phase %s while the supervisor ignores its stop", got)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("get took %s while a stop waits: the actor blocks", d)
		}
	}
	w.proc("h").Release()
	w.waitPhase("h", "Stopped")
}

// TestGatewayRestartReadopts: after a gateway restart the sandbox actor
// reloads its record and adopts the supervisor that still runs; one that
// died meanwhile is recovered.
func TestGatewayRestartReadopts(t *testing.T) {
	w := newWorld(t)
	w.ready("alive")
	w.ready("dead")
	w.restartGateway()
	w.proc("dead").Exit(errors.New("died while the gateway was down"))
	w.restartGateway()
	if ack := w.hello("alive"); ack.Status != messages.Status_STATUS_OK {
		t.Fatalf("hello after restart: %v", ack)
	}
	w.waitPhase("alive", "Ready")
	if n := len(w.drv.Procs("alive")); n != 1 {
		t.Fatalf("%d supervisors of alive: the running one was not adopted", n)
	}
	w.waitFor("dead recovered", func() bool { ph := w.phase("dead"); return ph == "Recovering" || ph == "Error" })
}

// TestConflictReloads: a record changed behind the actor's back (another
// writer) makes its next write fail with a conflict; the actor restarts,
// reloads the record, and the retried verb works.
func TestConflictReloads(t *testing.T) {
	w := newWorld(t)
	w.ready("x")
	rec := w.mustRecord("x")
	rec.Spec.Workdir = "/elsewhere"
	if _, err := w.st.Put(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	r := w.verb("x", messages.Verb_VERB_STOP)
	if r.Status != messages.Status_STATUS_UNAVAILABLE || !contains(r.Message, "changed since it was read") {
		t.Fatalf("stop over a changed record: %v", r)
	}
	w.waitFor("the actor restarted", func() bool { return w.env.Counters.Get("x", actor.RestartDirective) > 0 })
	w.waitFor("stop works after the reload", func() bool { return w.verb("x", messages.Verb_VERB_STOP).Status == messages.Status_STATUS_OK })
	w.waitPhase("x", "Stopped")
	if got := w.mustRecord("x").Spec.Workdir; got != "/elsewhere" {
		t.Fatalf("the other writer's change was lost: workdir %q", got)
	}
}

// TestCrossedHellosShareASession: two Hellos of one supervisor arriving
// together (one forwarded by another node, one sent after a Reconnect) get
// the same session, so the supervisor's heartbeats reach the live one
// whichever answer it keeps; a Hello a heartbeat period later gets a new
// session.
func TestCrossedHellosShareASession(t *testing.T) {
	w := newWorld(t)
	w.ready("x")
	first := w.hello("x").Session
	second := w.hello("x").Session
	if !first.Equal(second) {
		t.Fatalf("crossed Hellos got sessions %s and %s", first.Id, second.Id)
	}
	w.clock.Advance(2 * time.Second)
	if third := w.hello("x").Session; third.Equal(first) {
		t.Fatalf("a Hello 2 s later kept session %s", third.Id)
	}
}
