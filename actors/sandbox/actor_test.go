package sandbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
)

var verbs = []struct {
	wire messages.Verb
	verb lifecycle.Verb
}{
	{messages.Verb_VERB_START, lifecycle.VerbStart},
	{messages.Verb_VERB_STOP, lifecycle.VerbStop},
	{messages.Verb_VERB_STOP_FORCE, lifecycle.VerbStopForce},
	{messages.Verb_VERB_RECOVER, lifecycle.VerbRecover},
	{messages.Verb_VERB_DELETE, lifecycle.VerbDelete},
	{messages.Verb_VERB_DELETE_KEEP_WORKSPACE, lifecycle.VerbDeleteKeepWorkspace},
}

// reach brings a new sandbox name into phase through real causes.
func (w *world) reach(name string, phase lifecycle.Phase) {
	w.t.Helper()
	switch phase {
	case lifecycle.PhaseProvisioning:
		if r := w.create(name); r.Status != messages.Status_STATUS_OK {
			w.t.Fatalf("create: %v", r)
		}
	case lifecycle.PhaseReady:
		w.ready(name)
	case lifecycle.PhaseStopping, lifecycle.PhaseDeleting:
		w.drv.HoldStops(true) // the supervisor does not die until released
		w.ready(name)
		w.drv.HoldStops(false)
		v := messages.Verb_VERB_STOP
		if phase == lifecycle.PhaseDeleting {
			v = messages.Verb_VERB_DELETE
		}
		if r := w.verb(name, v); r.Status != messages.Status_STATUS_OK {
			w.t.Fatalf("%s: %v", v, r)
		}
	case lifecycle.PhaseStopped:
		w.ready(name)
		w.verb(name, messages.Verb_VERB_STOP)
	case lifecycle.PhaseError:
		// restart: never, and the workload fails: Error until a verb.
		if r := w.ask(&messages.CreateRequest{Name: name, Policy: []byte("version: 1\n"), Restart: "never"}); r.Status != messages.Status_STATUS_OK {
			w.t.Fatalf("create: %v", r)
		}
		w.hello(name)
		w.waitPhase(name, "Ready")
		w.sys.Root.Send(w.sandboxPID(name), &messages.WorkloadExited{Instance: w.proc(name).Instance, Code: 3})
	case lifecycle.PhaseRecovering:
		// The supervisor dies: Recovering, its backoff timer armed on the
		// fake clock (which does not move).
		w.ready(name)
		w.proc(name).Exit(errors.New("supervisor exited: signal: killed"))
	}
	w.waitPhase(name, phase.String())
}

// TestEveryVerbInEveryPhase applies every client verb in every phase
// through the actor: a verb the phase takes answers OK, is on disk before
// the answer and is carried out (the supervisor stopped, the files
// removed); one it refuses answers Refused (exit 4), naming the phase, and
// changes neither the phase nor the record.
func TestEveryVerbInEveryPhase(t *testing.T) {
	w := newWorld(t)
	phases := []lifecycle.Phase{lifecycle.PhaseProvisioning, lifecycle.PhaseReady, lifecycle.PhaseStopping, lifecycle.PhaseStopped,
		lifecycle.PhaseError, lifecycle.PhaseRecovering, lifecycle.PhaseDeleting}
	n := 0
	for _, ph := range phases {
		for _, v := range verbs {
			n++
			name := fmt.Sprintf("c%d", n)
			t.Run(ph.String()+"/"+v.verb.String(), func(t *testing.T) {
				w.t = t
				w.reach(name, ph)
				before := w.mustRecord(name)
				r := w.verb(name, v.wire)
				if !lifecycle.Accepts(ph, v.verb) {
					if r.Status != messages.Status_STATUS_REFUSED || !contains(r.Message, ph.String()) {
						t.Fatalf("%s in %s: %v, want Refused naming the phase", v.verb, ph, r)
					}
					if after := w.mustRecord(name); after.Revision != before.Revision || after.Lifecycle.Phase != ph {
						t.Fatalf("a refused verb wrote: revision %d -> %d, phase %s", before.Revision, after.Revision, after.Lifecycle.Phase)
					}
					if got := w.phase(name); got != ph.String() {
						t.Fatalf("phase %s after a refused verb, want %s", got, ph)
					}
				} else {
					if r.Status != messages.Status_STATUS_OK {
						t.Fatalf("%s in %s: %v, want OK", v.verb, ph, r)
					}
					// On disk when answered: the record has the phase the reply shows.
					rec, err := w.record(name)
					switch {
					case err == nil && rec.Revision <= before.Revision:
						t.Fatalf("answered %s, the store has revision %d still (%s)", r.Sandbox.Phase, rec.Revision, rec.Lifecycle.Phase)
					case err != nil && !isNotFound(err):
						t.Fatal(err)
					}
					w.carriedOut(name, v.verb)
				}
				for _, p := range w.drv.Procs(name) {
					p.Release()
				}
			})
		}
	}
	w.t = t
	t.Logf("%d (phase, verb) cells", n)
}

// carriedOut checks the effect of an accepted verb once it settles.
func (w *world) carriedOut(name string, v lifecycle.Verb) {
	w.t.Helper()
	for _, p := range w.drv.Procs(name) {
		p.Release()
	}
	switch v {
	case lifecycle.VerbStop, lifecycle.VerbStopForce:
		w.waitPhase(name, "Stopped")
		if live := w.drv.Live(name); len(live) != 0 {
			w.t.Fatalf("stopped with %d supervisors alive", len(live))
		}
		if rec := w.mustRecord(name); rec.Intent != store.IntentStopped || rec.SupervisorPID != 0 {
			w.t.Fatalf("stopped record: intent %s, supervisor pid %d", rec.Intent, rec.SupervisorPID)
		}
	case lifecycle.VerbDelete, lifecycle.VerbDeleteKeepWorkspace:
		w.waitPhase(name, "STATUS_NOT_FOUND")
		if _, err := w.record(name); !isNotFound(err) {
			w.t.Fatalf("record after delete: %v", err)
		}
		if live := w.drv.Live(name); len(live) != 0 {
			w.t.Fatalf("deleted with %d supervisors alive", len(live))
		}
		found := false
		for _, r := range w.drv.Removed() {
			found = found || (r.Name == name && r.KeepWorkspace == (v == lifecycle.VerbDeleteKeepWorkspace))
		}
		if !found {
			w.t.Fatalf("files of %s not removed (keep workspace %t): %+v", name, v == lifecycle.VerbDeleteKeepWorkspace, w.drv.Removed())
		}
	case lifecycle.VerbStart, lifecycle.VerbRecover:
		ph := w.phase(name)
		if ph != "Provisioning" && ph != "Recovering" && ph != "Ready" {
			w.t.Fatalf("after %s: %s", v, ph)
		}
		if len(w.drv.Live(name)) != 1 {
			w.t.Fatalf("after %s: %d supervisors alive, want 1", v, len(w.drv.Live(name)))
		}
	}
}
