package lifecycle

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Where each verb works, as DESIGN.md says (spelled out here on purpose,
// not computed from the package).
const (
	wCreate  = "create works only for a name not in use"
	wStart   = "start works from Stopped, Completed or Error"
	wStop    = "stop works from Provisioning, Ready, Error or Recovering"
	wForce   = "stop --force works from Provisioning, Ready, Stopping, Error or Recovering"
	wRecover = "recover works from Error or Recovering"
	wDelete  = "delete works in every phase but Deleting"
	wKeep    = "delete --keep-workspace works in every phase but Deleting"
	wExec    = "exec works only in Ready"
	wConnect = "connect works only in Ready"

	hCreate     = "use delete first, or choose another name"
	hStarting   = "it is starting; wait for Ready, or use stop to cancel the start"
	hRunning    = "it is already running; use stop, then start, to restart it"
	hStopping   = "it is stopping; wait for Stopped, or use stop --force to kill it without grace"
	hStopped    = "it is stopped; use start to run it again, or delete to remove it"
	hStoppedRun = "it is stopped; use start, then wait for Ready"
	hDone       = "its workload exited with code 0; use start to run it again, or delete to remove it"
	hDoneRun    = "its workload exited; use start, then wait for Ready"
	hError      = "use recover to retry now, or start to start afresh, then wait for Ready"
	hRecovering = "it is recovering; wait for Ready, or use recover to retry now"
	hDeleting   = "it is being deleted; only get and logs work until it is gone"
)

type verbWant struct {
	to      Phase
	action  Action
	refused string // the whole error message; empty when the verb works
}

func ok(to Phase, a Action) verbWant { return verbWant{to: to, action: a} }

func no(p Phase, works, hint string) verbWant {
	return verbWant{refused: "sandbox is " + p.String() + ": " + works + "; " + hint}
}

// TestEveryPhaseVerbPair checks all 8 phases x 11 verbs: the resulting
// phase and action, or the exact refusal, and that a refusal changes
// nothing.
func TestEveryPhaseVerbPair(t *testing.T) {
	const (
		P, R, Sg, Sd, C, E, Rc, D = PhaseProvisioning, PhaseReady, PhaseStopping, PhaseStopped,
			PhaseCompleted, PhaseError, PhaseRecovering, PhaseDeleting
	)
	table := map[Phase]map[Verb]verbWant{
		P: {
			VerbCreate: no(P, wCreate, hCreate), VerbStart: no(P, wStart, hStarting),
			VerbStop: ok(Sg, ActionStop), VerbStopForce: ok(Sg, ActionKill),
			VerbRecover: no(P, wRecover, hStarting),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(P, wExec, hStarting), VerbConnect: no(P, wConnect, hStarting),
			VerbLogs: ok(P, ActionNone), VerbGet: ok(P, ActionNone),
		},
		R: {
			VerbCreate: no(R, wCreate, hCreate), VerbStart: no(R, wStart, hRunning),
			VerbStop: ok(Sg, ActionStop), VerbStopForce: ok(Sg, ActionKill),
			VerbRecover: no(R, wRecover, "it is running and has nothing to recover; use stop, then start, to restart it"),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: ok(R, ActionNone), VerbConnect: ok(R, ActionNone),
			VerbLogs: ok(R, ActionNone), VerbGet: ok(R, ActionNone),
		},
		Sg: {
			VerbCreate: no(Sg, wCreate, hCreate), VerbStart: no(Sg, wStart, hStopping),
			VerbStop:      no(Sg, wStop, "it is already stopping; use stop --force to kill it without grace"),
			VerbStopForce: ok(Sg, ActionKill),
			VerbRecover:   no(Sg, wRecover, hStopping),
			VerbDelete:    ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(Sg, wExec, hStopping), VerbConnect: no(Sg, wConnect, hStopping),
			VerbLogs: ok(Sg, ActionNone), VerbGet: ok(Sg, ActionNone),
		},
		Sd: {
			VerbCreate: no(Sd, wCreate, hCreate), VerbStart: ok(P, ActionSpawn),
			VerbStop: no(Sd, wStop, hStopped), VerbStopForce: no(Sd, wForce, hStopped),
			VerbRecover: no(Sd, wRecover, hStopped),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(Sd, wExec, hStoppedRun), VerbConnect: no(Sd, wConnect, hStoppedRun),
			VerbLogs: ok(Sd, ActionNone), VerbGet: ok(Sd, ActionNone),
		},
		C: {
			VerbCreate: no(C, wCreate, hCreate), VerbStart: ok(P, ActionSpawn),
			VerbStop: no(C, wStop, hDone), VerbStopForce: no(C, wForce, hDone),
			VerbRecover: no(C, wRecover, hDone),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(C, wExec, hDoneRun), VerbConnect: no(C, wConnect, hDoneRun),
			VerbLogs: ok(C, ActionNone), VerbGet: ok(C, ActionNone),
		},
		E: {
			VerbCreate: no(E, wCreate, hCreate), VerbStart: ok(P, ActionSpawn),
			VerbStop: ok(Sg, ActionStop), VerbStopForce: ok(Sg, ActionKill),
			VerbRecover: ok(Rc, ActionSpawn),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(E, wExec, hError), VerbConnect: no(E, wConnect, hError),
			VerbLogs: ok(E, ActionNone), VerbGet: ok(E, ActionNone),
		},
		Rc: {
			VerbCreate: no(Rc, wCreate, hCreate),
			VerbStart:  no(Rc, wStart, "recovery is already restarting it; use recover to retry now, or stop to stop it"),
			VerbStop:   ok(Sg, ActionStop), VerbStopForce: ok(Sg, ActionKill),
			VerbRecover: ok(Rc, ActionSpawn),
			VerbDelete:  ok(D, ActionDelete), VerbDeleteKeepWorkspace: ok(D, ActionDeleteKeepWorkspace),
			VerbExec: no(Rc, wExec, hRecovering), VerbConnect: no(Rc, wConnect, hRecovering),
			VerbLogs: ok(Rc, ActionNone), VerbGet: ok(Rc, ActionNone),
		},
		D: {
			VerbCreate: no(D, wCreate, hDeleting), VerbStart: no(D, wStart, hDeleting),
			VerbStop: no(D, wStop, hDeleting), VerbStopForce: no(D, wForce, hDeleting),
			VerbRecover: no(D, wRecover, hDeleting),
			VerbDelete:  no(D, wDelete, hDeleting), VerbDeleteKeepWorkspace: no(D, wKeep, hDeleting),
			VerbExec: no(D, wExec, hDeleting), VerbConnect: no(D, wConnect, hDeleting),
			VerbLogs: ok(D, ActionNone), VerbGet: ok(D, ActionNone),
		},
	}
	pairs := 0
	for _, p := range Phases() {
		for _, v := range Verbs() {
			want, found := table[p][v]
			if !found {
				t.Errorf("table has no entry for (%s, %s)", p, v)
				continue
			}
			pairs++
			t.Run(p.String()+"/"+v.String(), func(t *testing.T) {
				m, _ := machineIn(t, p)
				before := m.Snapshot()
				checkErr := m.Check(v)
				tr, err := m.Apply(v, testClient)
				if (checkErr == nil) != (err == nil) {
					t.Errorf("Check says %v, Apply says %v", checkErr, err)
				}
				if want.refused != "" {
					var re *RefusedError
					if !errors.As(err, &re) {
						t.Fatalf("want refusal %q, got transition %+v, err %v", want.refused, tr, err)
					}
					if re.Phase != p || re.Verb != v || err.Error() != want.refused {
						t.Errorf("refusal:\n got %q (phase %s verb %s)\nwant %q", err, re.Phase, re.Verb, want.refused)
					}
					if after := m.Snapshot(); !reflect.DeepEqual(before, after) {
						t.Errorf("a refusal changed the machine:\n%+v\n%+v", before, after)
					}
					return
				}
				if err != nil {
					t.Fatalf("want %s, got %v", want.to, err)
				}
				if tr.From != p || tr.To != want.to || m.Phase() != want.to || tr.Action != want.action {
					t.Errorf("got %s -> %s action %s, want %s -> %s action %s", tr.From, tr.To, tr.Action, p, want.to, want.action)
				}
			})
		}
	}
	if pairs != 8*11 {
		t.Errorf("covered %d pairs, want 88", pairs)
	}
}

// TestRefusalsNameAWayOut: every refusal's hint names a verb that works in
// that phase ("use X"), except Deleting, where only the reads work.
func TestRefusalsNameAWayOut(t *testing.T) {
	for _, p := range Phases() {
		m, _ := machineIn(t, p)
		for _, v := range Verbs() {
			err := m.Check(v)
			if err == nil {
				continue
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("(%s, %s): %T", p, v, err)
			}
			if p == PhaseDeleting {
				if !strings.Contains(re.Hint, "get and logs") {
					t.Errorf("(%s, %s): hint %q names no way out", p, v, re.Hint)
				}
				continue
			}
			named := false
			for _, w := range stateOf(p).verbs() {
				named = named || strings.Contains(re.Hint, "use "+w.String())
			}
			if !named {
				t.Errorf("(%s, %s): hint %q names no verb that works in %s", p, v, re.Hint, p)
			}
		}
	}
}

func TestPhaseTypes(t *testing.T) {
	for _, p := range append(Phases(), PhaseNone) {
		s := stateOf(p)
		if s.phase() != p {
			t.Errorf("stateOf(%s).phase() = %s", p, s.phase())
		}
		for _, to := range s.next() {
			if to == PhaseNone || to == p && p != PhaseRecovering {
				t.Errorf("%s lists a bad next phase %s", p, to)
			}
		}
	}
}

func TestEnumNames(t *testing.T) {
	for _, p := range Phases() {
		var q Phase
		b, err := p.MarshalText()
		if err != nil || q.UnmarshalText(b) != nil || q != p {
			t.Errorf("phase %s: %q %v -> %s", p, b, err, q)
		}
	}
	for r := ReasonNone; r <= ReasonRecoveryExhausted; r++ {
		var q Reason
		b, _ := r.MarshalText()
		if err := q.UnmarshalText(b); err != nil || q != r {
			t.Errorf("reason %s: %q %v -> %s", r, b, err, q)
		}
	}
	if got := Phase(42).String(); got != "phase(42)" {
		t.Errorf("Phase(42) = %q", got)
	}
	if _, err := Phase(42).MarshalText(); err == nil {
		t.Error("Phase(42) marshalled")
	}
	if r, err := ParseRestartPolicy(""); err != nil || r != RestartOnFailure {
		t.Errorf(`ParseRestartPolicy("") = %s, %v`, r, err)
	}
	if _, err := ParseRestartPolicy("sometimes"); err == nil {
		t.Error("restart sometimes parsed")
	}
	if _, err := New(Config{}).Apply(Verb(0), testClient); err == nil {
		t.Error("verb 0 applied")
	}
}

// TestCloneIsIndependent: a step taken on a clone leaves the original as
// it was (persist, then apply: the actor keeps the clone only once saved).
func TestCloneIsIndependent(t *testing.T) {
	m := New(Config{})
	if _, err := m.Apply(VerbCreate, testClient); err != nil {
		t.Fatal(err)
	}
	if _, err := m.On(SessionUp{}, testGateway); err != nil {
		t.Fatal(err)
	}
	before := m.Snapshot()
	c := m.Clone()
	if _, err := c.Apply(VerbDelete, testClient); err != nil {
		t.Fatal(err)
	}
	if c.Phase() != PhaseDeleting || m.Phase() != PhaseReady {
		t.Fatalf("clone %s, original %s; want Deleting and Ready", c.Phase(), m.Phase())
	}
	after := m.Snapshot()
	if len(after.Transitions) != len(before.Transitions) || after.Phase != before.Phase || after.Message != before.Message {
		t.Fatalf("the original changed: %+v -> %+v", before, after)
	}
}

// TestRecordsNameWhoAsked: every transition records who asked for it (the
// client of a verb, the reporter of an event, the adopting node of a
// restore), in the step's records and in the persisted history; a step
// naming no one is refused and changes nothing.
func TestRecordsNameWhoAsked(t *testing.T) {
	m, c := newTestMachine(Config{})
	if _, err := m.Apply(VerbCreate, "client:bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.On(SessionUp{}, "supervisor:box"); err != nil {
		t.Fatal(err)
	}
	tr, err := m.Apply(VerbStop, "client:alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 1 || tr.Records[0].By != "client:alice" || tr.Records[0].To != PhaseStopping {
		t.Fatalf("stop's records: %+v", tr.Records)
	}
	before := m.Snapshot()
	if _, err := m.On(StopDone{}, ""); err == nil || m.Phase() != PhaseStopping {
		t.Fatalf("a step by no one: err %v, phase %s (want refused, Stopping)", err, m.Phase())
	}
	if _, err := m.Apply(VerbStart, ""); err == nil || len(m.Snapshot().Transitions) != len(before.Transitions) {
		t.Fatalf("a verb by no one: err %v, %d transitions (want refused, %d)", err, len(m.Snapshot().Transitions), len(before.Transitions))
	}
	drive(t, m, c, StopDone{})
	want := []struct {
		to Phase
		by string
	}{{PhaseProvisioning, "client:bob"}, {PhaseReady, "supervisor:box"}, {PhaseStopping, "client:alice"}, {PhaseStopped, testGateway}}
	h := m.Snapshot().Transitions
	if len(h) != len(want) {
		t.Fatalf("history %+v", h)
	}
	for i, w := range want {
		if h[i].To != w.to || h[i].By != w.by {
			t.Errorf("transition %d: -> %s by %q, want -> %s by %q", i, h[i].To, h[i].By, w.to, w.by)
		}
	}
	// A restore's adoption step is the adopting node's.
	r, _, err := Restore(m.Snapshot(), Config{}, false, "gateway:n2", WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(VerbStart, "client:carol"); err != nil {
		t.Fatal(err)
	}
	m2, _ := newTestMachine(Config{})
	drive(t, m2, c, VerbCreate, SessionUp{})
	r2, tr2, err := Restore(m2.Snapshot(), Config{}, true, "gateway:n2", WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr2.Records) == 0 || tr2.Records[0].By != "gateway:n2" {
		t.Fatalf("adoption records %+v, want by gateway:n2", tr2.Records)
	}
	if last := r2.Snapshot().Transitions; last[len(last)-1].By != "gateway:n2" {
		t.Fatalf("adoption not in the history: %+v", last)
	}
	if h := r.Snapshot().Transitions; h[len(h)-1].By != "client:carol" {
		t.Fatalf("start after a restore: %+v", h[len(h)-1])
	}
	if _, _, err := Restore(m2.Snapshot(), Config{}, true, ""); err == nil {
		t.Fatal("a restore by no one was taken")
	}
}
