package lifecycle

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

type constRand float64

func (r constRand) Float64() float64 { return float64(r) }

func nominal(attempt int) time.Duration {
	d := BackoffBase
	for range attempt {
		d *= 2
	}
	return min(d, BackoffMax)
}

func TestBackoffSequence(t *testing.T) {
	seq := func(seed uint64) []time.Duration {
		r := rand.New(rand.NewPCG(seed, 1))
		var out []time.Duration
		for a := range 14 {
			out = append(out, Backoff(a, r))
		}
		return out
	}
	got := seq(42)
	t.Logf("seed 42: %v", got)
	for a, d := range got {
		n := nominal(a)
		lo := max(BackoffBase, time.Duration(float64(n)*(1-BackoffJitter)))
		hi := min(BackoffMax, time.Duration(float64(n)*(1+BackoffJitter)))
		if d < lo || d > hi {
			t.Errorf("attempt %d: %v outside [%v, %v]", a, d, lo, hi)
		}
	}
	if again := seq(42); !equalDurations(got, again) {
		t.Errorf("same seed, different delays: %v vs %v", got, again)
	}
	if other := seq(43); equalDurations(got, other) {
		t.Errorf("seeds 42 and 43 gave the same delays %v", got)
	}
	// Jitter really spreads over its range: 1000 draws for attempt 3
	// (nominal 1.6 s) cover most of [1.28 s, 1.92 s).
	r := rand.New(rand.NewPCG(9, 9))
	lo, hi := time.Hour, time.Duration(0)
	for range 1000 {
		d := Backoff(3, r)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo > 1300*time.Millisecond || hi < 1900*time.Millisecond || hi >= 1920*time.Millisecond {
		t.Errorf("attempt 3 spread [%v, %v], want about [1.28s, 1.92s)", lo, hi)
	}
	// The edges: never below 0.2 s, never above 30 s.
	for _, c := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{0, 0, BackoffBase}, {0, 0.5, BackoffBase}, {1, 0, 320 * time.Millisecond},
		{8, 0.999999, BackoffMax}, {50, 0, 24 * time.Second}, {-1, 0.5, BackoffBase},
	} {
		if got := Backoff(c.attempt, constRand(c.r)); got != c.want {
			t.Errorf("Backoff(%d, %v) = %v, want %v", c.attempt, c.r, got, c.want)
		}
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRecoveryExhaustedAndRecover: 10 failed attempts in a row give
// Error/RecoveryExhausted with no timer; recover resets and tries at once.
func TestRecoveryExhaustedAndRecover(t *testing.T) {
	m, c := machineIn(t, PhaseReady)
	tr := drive(t, m, c, SupervisorLost{Detail: "killed"})
	for n := 1; n <= MaxRecoveryAttempts; n++ {
		if tr.Timer.Kind != TimerRetry {
			t.Fatalf("before attempt %d: timer %+v", n, tr.Timer)
		}
		if d := tr.Timer.At.Sub(c.Now()); d < BackoffBase || d > BackoffMax ||
			d < time.Duration(float64(nominal(n-1))*(1-BackoffJitter)) {
			t.Errorf("delay before attempt %d: %v (nominal %v)", n, d, nominal(n-1))
		}
		tr = drive(t, m, c, fireTimer{})
		if tr.Action != ActionSpawn || m.Snapshot().RecoveryAttempts != n {
			t.Fatalf("attempt %d: %+v, attempts %d", n, tr, m.Snapshot().RecoveryAttempts)
		}
		tr = drive(t, m, c, StartFailed{Detail: "spawn failed"})
	}
	s := m.Snapshot()
	if s.Phase != PhaseError || s.Reason != ReasonRecoveryExhausted || tr.Action != ActionReap ||
		tr.Timer.Kind != TimerNone || !s.NextRetry.IsZero() {
		t.Fatalf("after 10 failures: %+v / %+v", tr, s)
	}
	want := "10 recovery attempts failed in a row, the last with StartFailed (spawn failed); no more automatic tries: use recover or start"
	if s.Message != want {
		t.Errorf("message %q\nwant    %q", s.Message, want)
	}
	// No more automatic tries: an old timer does nothing.
	if tr, _ := m.On(TimerFired{Seq: m.seq}, testGateway); tr.Action != ActionNone || m.Phase() != PhaseError {
		t.Errorf("a stale timer acted: %+v", tr)
	}
	tr = drive(t, m, c, VerbRecover)
	s = m.Snapshot()
	if tr.Action != ActionSpawn || tr.Timer.Kind != TimerStart || s.Phase != PhaseRecovering ||
		s.RecoveryAttempts != 1 || s.Reason != ReasonStartFailed {
		t.Fatalf("recover: %+v / %+v", tr, s)
	}
	tr = drive(t, m, c, SessionUp{})
	if tr.To != PhaseReady || tr.Timer.Kind != TimerStable {
		t.Fatalf("session up after recover: %+v", tr)
	}
	c.advance(time.Second) // well before StableAfter: attempts still count
	if m.Snapshot().RecoveryAttempts != 1 {
		t.Fatal("attempts reset too early")
	}
	drive(t, m, c, fireTimer{})
	if s := m.Snapshot(); s.RecoveryAttempts != 0 || s.Phase != PhaseReady {
		t.Fatalf("after StableAfter: %+v", s)
	}
}

// TestCrashLoopExhausts: a workload that fails soon after every recovery
// counts each as a failed attempt; one that stays Ready for StableAfter
// resets the count.
func TestCrashLoopExhausts(t *testing.T) {
	m, c := machineIn(t, PhaseReady)
	drive(t, m, c, WorkloadExited{Code: 2})
	for range MaxRecoveryAttempts {
		drive(t, m, c, fireTimer{}, SessionUp{})
		c.advance(time.Second)
		drive(t, m, c, WorkloadExited{Code: 2})
	}
	if s := m.Snapshot(); s.Phase != PhaseError || s.Reason != ReasonRecoveryExhausted {
		t.Fatalf("crash loop: %s/%s %q", s.Phase, s.Reason, s.Message)
	}

	m, c = machineIn(t, PhaseReady)
	drive(t, m, c, WorkloadExited{Code: 2})
	for range 3 * MaxRecoveryAttempts {
		drive(t, m, c, fireTimer{}, SessionUp{}, fireTimer{}, WorkloadExited{Code: 2})
	}
	if s := m.Snapshot(); s.Phase != PhaseRecovering || s.RecoveryAttempts != 0 {
		t.Fatalf("stable runs: %s/%s attempts %d", s.Phase, s.Reason, s.RecoveryAttempts)
	}
}

// TestAlwaysGivesUp: restart: always with a workload that exits 0 at once
// stops after 10 quick restarts, in Completed, where start works.
func TestAlwaysGivesUp(t *testing.T) {
	m, c := newTestMachine(Config{Restart: RestartAlways})
	drive(t, m, c, VerbCreate, SessionUp{}, WorkloadExited{})
	for range MaxRecoveryAttempts {
		drive(t, m, c, fireTimer{}, SessionUp{}, WorkloadExited{})
	}
	s := m.Snapshot()
	if s.Phase != PhaseCompleted || !strings.Contains(s.Message, "gave up after 10") {
		t.Fatalf("%s %q", s.Phase, s.Message)
	}
	if tr := drive(t, m, c, VerbStart); tr.To != PhaseProvisioning || m.Snapshot().RecoveryAttempts != 0 {
		t.Fatalf("start: %+v", tr)
	}
}

func TestHistoryCappedAt20(t *testing.T) {
	m, c := machineIn(t, PhaseReady) // 2 records
	for range 15 {
		c.advance(time.Second)
		for _, s := range []any{VerbStop, StopDone{}, VerbStart, SessionUp{}} { // 4 records
			drive(t, m, c, s)
			if n := len(m.Snapshot().Transitions); n > HistoryLen {
				t.Fatalf("history grew to %d", n)
			}
		}
	}
	h := m.Snapshot().Transitions
	if len(h) != HistoryLen {
		t.Fatalf("history has %d entries", len(h))
	}
	last := h[len(h)-1]
	if last.From != PhaseProvisioning || last.To != PhaseReady || !last.At.Equal(c.Now()) {
		t.Errorf("last record %+v", last)
	}
	for i := 1; i < len(h); i++ {
		if h[i].From != h[i-1].To || h[i].At.Before(h[i-1].At) {
			t.Errorf("records %d and %d do not chain: %+v %+v", i-1, i, h[i-1], h[i])
		}
	}
	// A snapshot is a copy: changing it leaves the machine alone.
	h[0].From = PhaseDeleting
	if m.Snapshot().Transitions[0].From == PhaseDeleting {
		t.Error("snapshot shares the history")
	}
}

func TestSnapshotJSON(t *testing.T) {
	m, c := machineIn(t, PhaseRecovering)
	b, err := json.Marshal(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"phase":"Recovering"`, `"reason":"SupervisorLost"`, `"recoveryAttempts":0`,
		`"nextRetry":"`, `"transitions":[{"from":"None","to":"Provisioning","reason":""`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	m2, tr, err := Restore(s, Config{}, false, testGateway, WithClock(c))
	if err != nil || m2.Phase() != PhaseRecovering || tr.Timer.Kind != TimerRetry {
		t.Fatalf("restore: %+v %v", tr, err)
	}
}

func TestRestore(t *testing.T) {
	cases := []struct {
		phase    Phase
		alive    bool
		to       Phase
		reason   Reason
		action   Action
		timer    TimerKind
		attempts int // set in the snapshot before restoring
	}{
		{PhaseProvisioning, true, PhaseProvisioning, ReasonNone, ActionNone, TimerStart, 0},
		{PhaseProvisioning, false, PhaseProvisioning, ReasonNone, ActionSpawn, TimerStart, 0},
		{PhaseReady, true, PhaseRecovering, ReasonSessionLost, ActionNone, TimerGrace, 0},
		{PhaseReady, false, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerRetry, 0},
		{PhaseRecovering, true, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerGrace, 3},
		{PhaseRecovering, false, PhaseRecovering, ReasonSupervisorLost, ActionNone, TimerRetry, 3},
		{PhaseRecovering, false, PhaseError, ReasonRecoveryExhausted, ActionReap, TimerNone, 10},
		{PhaseStopping, true, PhaseStopping, ReasonNone, ActionStop, TimerNone, 0},
		{PhaseStopped, true, PhaseStopped, ReasonNone, ActionReap, TimerNone, 0},
		{PhaseStopped, false, PhaseStopped, ReasonNone, ActionNone, TimerNone, 0},
		{PhaseCompleted, false, PhaseCompleted, ReasonNone, ActionNone, TimerNone, 0},
		{PhaseError, true, PhaseError, ReasonWorkloadFailed, ActionReap, TimerNone, 0},
		{PhaseDeleting, false, PhaseDeleting, ReasonNone, ActionDelete, TimerNone, 0},
	}
	for _, tc := range cases {
		m, c := machineIn(t, tc.phase)
		s := m.Snapshot()
		s.RecoveryAttempts = tc.attempts
		m2, tr, err := Restore(s, Config{Restart: m.cfg.Restart}, tc.alive, testGateway, WithClock(c))
		if err != nil {
			t.Fatalf("%s alive=%v: %v", tc.phase, tc.alive, err)
		}
		if tr.To != tc.to || tr.Reason != tc.reason || tr.Action != tc.action || tr.Timer.Kind != tc.timer ||
			m2.Phase() != tc.to {
			t.Errorf("%s alive=%v attempts=%d: got %s/%s %s timer %s, want %s/%s %s timer %s",
				tc.phase, tc.alive, tc.attempts, tr.To, tr.Reason, tr.Action, tr.Timer.Kind, tc.to, tc.reason, tc.action, tc.timer)
		}
	}
	if _, _, err := Restore(Snapshot{Phase: PhaseNone}, Config{}, false, testGateway); err == nil {
		t.Error("restored a snapshot without a phase")
	}
}

// TestBackoffScale: BackoffScale shrinks every delay by its factor and
// keeps the doubling, so ten attempts fit in a test.
func TestBackoffScale(t *testing.T) {
	m, c := newTestMachine(Config{BackoffScale: 0.01})
	drive(t, m, c, VerbCreate, SessionUp{})
	tr := drive(t, m, c, SupervisorLost{Detail: "killed"})
	var delays []time.Duration
	for n := 1; n <= 4; n++ {
		d := tr.Timer.At.Sub(c.Now())
		lo := time.Duration(float64(nominal(n-1))*(1-BackoffJitter)) / 100
		hi := time.Duration(float64(nominal(n-1))*(1+BackoffJitter)) / 100
		if tr.Timer.Kind != TimerRetry || d < lo || d > hi {
			t.Fatalf("attempt %d: timer %+v, delay %v, want in [%v, %v]", n, tr.Timer.Kind, d, lo, hi)
		}
		delays = append(delays, d)
		drive(t, m, c, fireTimer{})
		tr = drive(t, m, c, StartFailed{Detail: "spawn failed"})
	}
	t.Logf("scaled delays: %v", delays)
}

// TestTimerPending: the start timer is pending while Provisioning and
// voided by the move to Ready; a recovery's retry is pending again.
func TestTimerPending(t *testing.T) {
	m, c := newTestMachine(Config{})
	drive(t, m, c, VerbCreate)
	if !m.TimerPending() {
		t.Fatal("Provisioning: no start timer pending")
	}
	drive(t, m, c, SessionUp{})
	if m.TimerPending() {
		t.Fatal("Ready after create: a timer is still pending")
	}
	drive(t, m, c, SupervisorLost{Detail: "killed"})
	if !m.TimerPending() {
		t.Fatal("Recovering: no retry pending")
	}
}
