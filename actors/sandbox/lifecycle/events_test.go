package lifecycle

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestEvents(t *testing.T) {
	ready := []any{VerbCreate, SessionUp{}}
	retrying := append(ready[:2:2], SupervisorLost{Detail: "killed"})
	graceWait := append(ready[:2:2], SessionLost{Detail: "cut"})
	inAttempt := append(retrying[:3:3], fireTimer{})
	type step struct {
		from, to Phase
		reason   Reason
		action   Action
		timer    TimerKind
		records  int // history entries the event adds
	}
	cases := []struct {
		name     string
		restart  RestartPolicy
		setup    []any
		event    any
		want     step
		attempts int
		msg      string // substring of the message after the event
		unexpect bool   // want *UnexpectedEventError
		done     bool
	}{
		{name: "provisioning session up", setup: ready[:1], event: SessionUp{},
			want: step{PhaseProvisioning, PhaseReady, ReasonNone, ActionNone, TimerNone, 1}},
		{name: "provisioning start failed", setup: ready[:1], event: StartFailed{Detail: "exec: no such file"},
			want: step{PhaseProvisioning, PhaseRecovering, ReasonStartFailed, ActionNone, TimerRetry, 2},
			msg:  "exec: no such file; recovery attempt 1 of 10 in"},
		{name: "provisioning cannot start", setup: ready[:1], event: StartFailed{Detail: "the command /x does not exist", Permanent: true},
			want: step{PhaseProvisioning, PhaseError, ReasonStartFailed, ActionReap, TimerNone, 1},
			msg:  "the command /x does not exist; " + CannotStartHint},
		{name: "provisioning start failed never", restart: RestartNever, setup: ready[:1], event: StartFailed{Detail: "spawn"},
			want: step{PhaseProvisioning, PhaseError, ReasonStartFailed, ActionReap, TimerNone, 1},
			msg:  "spawn; restart: never (use start or recover)"},
		{name: "provisioning start timeout never", restart: RestartNever, setup: ready[:1], event: fireTimer{},
			want: step{PhaseProvisioning, PhaseError, ReasonStartFailed, ActionReap, TimerNone, 1},
			msg:  "session was not up within 30s; restart: never"},
		{name: "provisioning start timeout", setup: ready[:1], event: fireTimer{},
			want: step{PhaseProvisioning, PhaseRecovering, ReasonStartFailed, ActionNone, TimerRetry, 2},
			msg:  "session was not up within 30s"},
		{name: "provisioning exit 0", setup: ready[:1], event: WorkloadExited{Code: 0},
			want: step{PhaseProvisioning, PhaseCompleted, ReasonNone, ActionReap, TimerNone, 1}},
		{name: "ready exit 0", setup: ready, event: WorkloadExited{Code: 0},
			want: step{PhaseReady, PhaseCompleted, ReasonNone, ActionReap, TimerNone, 1}},
		{name: "ready exit 0 restart always", restart: RestartAlways, setup: ready, event: WorkloadExited{Code: 0},
			want: step{PhaseReady, PhaseRecovering, ReasonNone, ActionNone, TimerRetry, 2}, msg: "restart: always"},
		{name: "ready exit 3 on-failure", setup: ready, event: WorkloadExited{Code: 3},
			want: step{PhaseReady, PhaseRecovering, ReasonWorkloadFailed, ActionNone, TimerRetry, 2},
			msg:  "workload exited with code 3"},
		{name: "ready exit 3 always", restart: RestartAlways, setup: ready, event: WorkloadExited{Code: 3},
			want: step{PhaseReady, PhaseRecovering, ReasonWorkloadFailed, ActionNone, TimerRetry, 2}},
		{name: "ready exit 3 never", restart: RestartNever, setup: ready, event: WorkloadExited{Code: 3},
			want: step{PhaseReady, PhaseError, ReasonWorkloadFailed, ActionReap, TimerNone, 1},
			msg:  "workload exited with code 3; restart: never (use start or recover)"},
		{name: "ready session lost", setup: ready, event: SessionLost{Detail: "cut"},
			want: step{PhaseReady, PhaseRecovering, ReasonSessionLost, ActionNone, TimerGrace, 2},
			msg:  "cut; waiting 20s for the supervisor to reconnect"},
		{name: "ready supervisor lost", setup: ready, event: SupervisorLost{},
			want: step{PhaseReady, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerRetry, 2},
			msg:  "SupervisorLost; recovery attempt 1 of 10 in"},
		{name: "ready boundary failed", setup: ready, event: BoundaryFailed{Detail: "dns listener"},
			want: step{PhaseReady, PhaseRecovering, ReasonBoundaryFailed, ActionNone, TimerRetry, 2}},
		{name: "ready node lost", setup: ready, event: NodeLost{Detail: "node-2"},
			want: step{PhaseReady, PhaseRecovering, ReasonNodeLost, ActionNone, TimerRetry, 2}},
		{name: "ready duplicate session up", setup: ready, event: SessionUp{},
			want: step{PhaseReady, PhaseReady, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "ready stop done", setup: ready, event: StopDone{}, unexpect: true},
		{name: "ready delete done", setup: ready, event: DeleteDone{}, unexpect: true},
		{name: "ready attempt failed", setup: ready, event: RecoveryAttemptFailed{}, unexpect: true},
		{name: "stopping stop done", setup: append(ready[:2:2], VerbStop), event: StopDone{},
			want: step{PhaseStopping, PhaseStopped, ReasonNone, ActionNone, TimerNone, 1}},
		{name: "stopping supervisor lost", setup: append(ready[:2:2], VerbStop), event: SupervisorLost{},
			want: step{PhaseStopping, PhaseStopping, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "stopping exit 1", setup: append(ready[:2:2], VerbStop), event: WorkloadExited{Code: 1},
			want: step{PhaseStopping, PhaseStopping, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "stopping delete done", setup: append(ready[:2:2], VerbStop), event: DeleteDone{}, unexpect: true},
		{name: "stopped session up", setup: append(ready[:2:2], VerbStop, StopDone{}), event: SessionUp{}, unexpect: true},
		{name: "stopped supervisor lost", setup: append(ready[:2:2], VerbStop, StopDone{}), event: SupervisorLost{},
			want: step{PhaseStopped, PhaseStopped, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "completed session up", setup: append(ready[:2:2], WorkloadExited{}), event: SessionUp{}, unexpect: true},
		{name: "error session up", restart: RestartNever, setup: append(ready[:2:2], WorkloadExited{Code: 1}),
			event: SessionUp{}, unexpect: true},
		{name: "retry due", setup: retrying, event: fireTimer{}, attempts: 1,
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionSpawn, TimerStart, 0},
			msg:  "recovery attempt 1 of 10: respawning the supervisor"},
		{name: "stale timer", setup: retrying, event: TimerFired{Seq: 1},
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerNone, 0}},
		{name: "waiting retry exit", setup: retrying, event: WorkloadExited{Code: 0},
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerNone, 0}},
		{name: "reconnect within grace", setup: graceWait, event: SessionUp{},
			want: step{PhaseRecovering, PhaseReady, ReasonNone, ActionNone, TimerNone, 1}},
		{name: "grace expired", setup: graceWait, event: fireTimer{}, attempts: 1,
			want: step{PhaseRecovering, PhaseRecovering, ReasonSessionLost, ActionSpawn, TimerStart, 1},
			msg:  "recovery attempt 1 of 10"},
		{name: "supervisor lost during grace", setup: graceWait, event: SupervisorLost{Detail: "exit"},
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerRetry, 1}},
		{name: "session lost during grace", setup: graceWait, event: SessionLost{},
			want: step{PhaseRecovering, PhaseRecovering, ReasonSessionLost, ActionNone, TimerNone, 0}},
		{name: "attempt failed to start", setup: inAttempt, event: StartFailed{Detail: "no workspace"}, attempts: 1,
			want: step{PhaseRecovering, PhaseRecovering, ReasonStartFailed, ActionNone, TimerRetry, 1},
			msg:  "no workspace; recovery attempt 2 of 10 in"},
		{name: "attempt cannot start", setup: inAttempt, event: RecoveryAttemptFailed{Detail: "execve /bin/sh: permission denied", Permanent: true}, attempts: 1,
			want: step{PhaseRecovering, PhaseError, ReasonStartFailed, ActionReap, TimerNone, 1},
			msg:  "execve /bin/sh: permission denied; not retried"},
		{name: "attempt start failed permanently", setup: inAttempt, event: StartFailed{Detail: "gone", Permanent: true}, attempts: 1,
			want: step{PhaseRecovering, PhaseError, ReasonStartFailed, ActionReap, TimerNone, 1}},
		{name: "waiting retry cannot start (late)", setup: retrying, event: StartFailed{Detail: "late", Permanent: true},
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerNone, 0}},
		{name: "ready cannot start (not a start in flight)", setup: ready, event: StartFailed{Detail: "late", Permanent: true},
			want: step{PhaseReady, PhaseRecovering, ReasonStartFailed, ActionNone, TimerRetry, 2}},
		{name: "attempt failed generically", setup: inAttempt, event: RecoveryAttemptFailed{Detail: "driver"}, attempts: 1,
			want: step{PhaseRecovering, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerRetry, 1}},
		{name: "attempt timed out", setup: inAttempt, event: fireTimer{}, attempts: 1,
			want: step{PhaseRecovering, PhaseRecovering, ReasonStartFailed, ActionNone, TimerRetry, 1}},
		{name: "attempt succeeded", setup: inAttempt, event: SessionUp{}, attempts: 1,
			want: step{PhaseRecovering, PhaseReady, ReasonNone, ActionNone, TimerStable, 1},
			msg:  "recovered from SupervisorLost after 1 attempt(s)"},
		{name: "attempt exit 0", setup: inAttempt, event: WorkloadExited{Code: 0}, attempts: 1,
			want: step{PhaseRecovering, PhaseCompleted, ReasonNone, ActionReap, TimerNone, 1}},
		{name: "deleting delete done", setup: append(ready[:2:2], VerbDelete), event: DeleteDone{}, done: true,
			want: step{PhaseDeleting, PhaseDeleting, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "deleting stop done", setup: append(ready[:2:2], VerbDelete), event: StopDone{},
			want: step{PhaseDeleting, PhaseDeleting, ReasonNone, ActionNone, TimerNone, 0}},
		{name: "deleting supervisor lost", setup: append(ready[:2:2], VerbDelete), event: SupervisorLost{},
			want: step{PhaseDeleting, PhaseDeleting, ReasonNone, ActionNone, TimerNone, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, c := newTestMachine(Config{Restart: tc.restart})
			drive(t, m, c, tc.setup...)
			before := m.Snapshot()
			tr, err := do(m, c, tc.event)
			if tc.unexpect {
				var ue *UnexpectedEventError
				if !errors.As(err, &ue) || ue.Phase != before.Phase {
					t.Fatalf("want UnexpectedEventError in %s, got %+v, %v", before.Phase, tr, err)
				}
				if !reflect.DeepEqual(before, m.Snapshot()) {
					t.Error("an unexpected event changed the machine")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := step{tr.From, tr.To, tr.Reason, tr.Action, tr.Timer.Kind, len(tr.Records)}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			s := m.Snapshot()
			if s.Phase != tr.To || s.Reason != tr.Reason || s.Message != tr.Message {
				t.Errorf("snapshot %s/%s %q disagrees with transition %s/%s %q", s.Phase, s.Reason, s.Message, tr.To, tr.Reason, tr.Message)
			}
			if s.RecoveryAttempts != tc.attempts {
				t.Errorf("attempts %d, want %d", s.RecoveryAttempts, tc.attempts)
			}
			if !strings.Contains(tr.Message, tc.msg) {
				t.Errorf("message %q lacks %q", tr.Message, tc.msg)
			}
			if tr.Done != tc.done {
				t.Errorf("done %v, want %v", tr.Done, tc.done)
			}
			// A new timer lies ahead and shows as nextRetry when it is a retry
			// or a grace; a move without one voids nextRetry; otherwise it stays.
			wantNext := before.NextRetry
			switch k := tr.Timer.Kind; {
			case k == TimerRetry || k == TimerGrace:
				wantNext = tr.Timer.At
			case k != TimerNone || len(tr.Records) > 0:
				wantNext = time.Time{}
			}
			if !s.NextRetry.Equal(wantNext) || tr.Timer.Kind != TimerNone && !tr.Timer.At.After(c.Now()) {
				t.Errorf("timer %+v, nextRetry %v (want %v), now %v", tr.Timer, s.NextRetry, wantNext, c.Now())
			}
			n := len(s.Transitions)
			for i, r := range tr.Records {
				if s.Transitions[n-len(tr.Records)+i] != r || !r.At.Equal(c.Now()) {
					t.Errorf("record %d %+v is not the history's tail at %v", i, r, c.Now())
				}
			}
		})
	}
}

// TestStopForceEscalates: stop --force while a graceful stop runs kills at
// once without a new history entry, and is what a restore re-issues.
func TestStopForceEscalates(t *testing.T) {
	m, c := machineIn(t, PhaseStopping)
	tr := drive(t, m, c, VerbStopForce)
	if tr.Action != ActionKill || len(tr.Records) != 0 || !m.Snapshot().Force {
		t.Fatalf("escalation: %+v", tr)
	}
	_, tr, err := Restore(m.Snapshot(), Config{}, true, testGateway, WithClock(c))
	if err != nil || tr.Action != ActionKill {
		t.Fatalf("restore of a forced stop: %+v %v", tr, err)
	}
}

// TestAdoptionNamed: a restore says what made it adopt the sandbox (a
// cluster node's takeover), and "gateway restart" by default.
func TestAdoptionNamed(t *testing.T) {
	for _, tc := range []struct{ adoption, want string }{
		{"", "session lost at gateway restart"},
		{"takeover by node n2", "session lost at takeover by node n2"},
	} {
		m, c := machineIn(t, PhaseReady)
		_, tr, err := Restore(m.Snapshot(), Config{Adoption: tc.adoption}, true, testGateway, WithClock(c))
		if err != nil || len(tr.Records) == 0 || tr.Records[0].Message != tc.want {
			t.Fatalf("restore with adoption %q: %+v %v; want first record %q", tc.adoption, tr.Records, err, tc.want)
		}
	}
}
