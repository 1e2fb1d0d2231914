package lifecycle

import (
	"strings"
	"testing"
)

// TestCannotStartNoRetries: a start that cannot succeed (a missing
// command) goes to Error/StartFailed at once, with no timer and no
// recovery attempt counted; start, recover, stop and delete work from
// there and the message says so; a restore keeps it where it is; the same
// failure of a recover's attempt lands in Error again, not in a backoff.
func TestCannotStartNoRetries(t *testing.T) {
	m, c := machineIn(t, PhaseProvisioning)
	tr := drive(t, m, c, StartFailed{Detail: "the sandbox cannot start: the command /no/such/bin does not exist in the sandbox", Permanent: true})
	s := m.Snapshot()
	if s.Phase != PhaseError || s.Reason != ReasonStartFailed || s.Cause != ReasonStartFailed ||
		s.RecoveryAttempts != 0 || !s.NextRetry.IsZero() || m.TimerPending() || tr.Action != ActionReap {
		t.Fatalf("after a permanent start failure: %+v / %+v", tr, s)
	}
	for _, v := range []string{"/no/such/bin", "start", "recover", "delete"} {
		if !strings.Contains(s.Message, v) {
			t.Errorf("message %q does not name %q", s.Message, v)
		}
	}
	for _, v := range []Verb{VerbStart, VerbRecover, VerbStop, VerbDelete} {
		if err := m.Check(v); err != nil {
			t.Errorf("%s refused in Error/StartFailed: %v", v, err)
		}
	}
	// A gateway restart leaves it in Error, nothing to run.
	r, rt, err := Restore(s, Config{}, false, testGateway, WithClock(c))
	if err != nil || rt.Action != ActionNone || rt.Timer.Kind != TimerNone || r.Phase() != PhaseError {
		t.Fatalf("restore: %+v %v", rt, err)
	}
	// recover tries once; the same failure lands in Error again.
	tr = drive(t, m, c, VerbRecover)
	if tr.Action != ActionSpawn || m.Phase() != PhaseRecovering {
		t.Fatalf("recover: %+v", tr)
	}
	tr = drive(t, m, c, RecoveryAttemptFailed{Detail: "the command /no/such/bin does not exist", Permanent: true})
	if tr.To != PhaseError || tr.Reason != ReasonStartFailed || tr.Timer.Kind != TimerNone || m.TimerPending() {
		t.Fatalf("a recover's permanent failure: %+v", tr)
	}
	// start after a fix: Provisioning, then Ready.
	tr = drive(t, m, c, VerbStart, SessionUp{})
	if tr.To != PhaseReady {
		t.Fatalf("start after the fix: %+v", tr)
	}
}

// TestRestartNeverStartFailures: with restart: never a start failure
// that might heal is not retried either; on-failure retries it.
func TestRestartNeverStartFailures(t *testing.T) {
	for _, tc := range []struct {
		restart RestartPolicy
		want    Phase
	}{{RestartNever, PhaseError}, {RestartOnFailure, PhaseRecovering}, {RestartAlways, PhaseRecovering}} {
		m, c := newTestMachine(Config{Restart: tc.restart})
		tr := drive(t, m, c, VerbCreate, StartFailed{Detail: "supervisor.start: injected fault"})
		if tr.To != tc.want || tr.Reason != ReasonStartFailed || (tc.want == PhaseError) == m.TimerPending() {
			t.Errorf("restart %s: %+v, timer pending %v", tc.restart, tr, m.TimerPending())
		}
	}
}
