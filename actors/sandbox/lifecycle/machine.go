package lifecycle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Clock is the time seam: the machine reads the time only through it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// Config holds a machine's tunables. Zero durations take the defaults.
type Config struct {
	// Restart applies when the workload exits (default on-failure).
	Restart RestartPolicy
	// Grace is how long Recovering waits for a lost session's supervisor
	// to reconnect before respawning it (default 20 s).
	Grace time.Duration
	// StartTimeout is how long a start or recovery attempt may take to
	// bring the session up before it counts as StartFailed (default 30 s).
	StartTimeout time.Duration
	// StableAfter is how long Ready must last after a recovery for the
	// attempt count to reset (default 30 s); a workload failing sooner
	// counts as one more failed attempt, so a crash loop ends in
	// RecoveryExhausted instead of restarting every 0.2 s forever.
	StableAfter time.Duration
	// BackoffScale multiplies every recovery backoff delay (default 1).
	// Tests and the chaos harness shrink it to walk ten attempts in
	// seconds; the schedule's shape (doubling, cap, jitter) is unchanged.
	BackoffScale float64
	// Adoption names the event that made this machine adopt its
	// sandbox, in the messages of a restore ("gateway restart" when
	// empty; a cluster node says it took the sandbox over).
	Adoption string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Grace, 20*time.Second)
	def(&c.StartTimeout, 30*time.Second)
	def(&c.StableAfter, 30*time.Second)
	if c.BackoffScale <= 0 {
		c.BackoffScale = 1
	}
	return c
}

// Option configures a Machine.
type Option func(*Machine)

// WithClock sets the clock (default SystemClock).
func WithClock(c Clock) Option { return func(m *Machine) { m.clock = c } }

// WithRand sets the jitter source (default a PCG seeded from the clock).
func WithRand(r Rand) Option { return func(m *Machine) { m.rnd = r } }

// Timer is a timer a Transition asks the actor to arm: when At passes,
// deliver TimerFired{Seq}. A new timer replaces the earlier one; a timer
// whose Seq is no longer current is ignored when it fires.
type Timer struct {
	Seq  uint64
	Kind TimerKind
	At   time.Time
}

// Record is one entry of the transition history (`transitions` in
// `sandbox get -o json`).
type Record struct {
	From    Phase     `json:"from"`
	To      Phase     `json:"to"`
	Reason  Reason    `json:"reason"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
	// By is who asked for the step: a client's identity for a verb
	// ("client:bob"), or what did it itself ("gateway:NODE" for its
	// timers, adoptions and the driver's reports, "supervisor:NAME" for
	// what the supervisor reported). Empty in records from before this
	// was recorded.
	By string `json:"by,omitempty"`
}

// Transition is the outcome of one step.
type Transition struct {
	From, To Phase
	// Reason and Message are the machine's after the step.
	Reason  Reason
	Message string
	// Action is what the actor must do now.
	Action Action
	// Timer, when its Kind is not TimerNone, is the timer to arm.
	Timer Timer
	// Records are the history entries this step added (zero, one, or two
	// for a failure that goes Error -> Recovering); each is an audit event.
	Records []Record
	// Done: the delete is complete; the actor drops the record and stops.
	Done bool
}

// Snapshot is the machine's persisted and displayed state.
type Snapshot struct {
	Phase            Phase     `json:"phase"`
	Reason           Reason    `json:"reason"`
	Cause            Reason    `json:"cause,omitempty"`
	Message          string    `json:"message"`
	Since            time.Time `json:"since"`
	RecoveryAttempts int       `json:"recoveryAttempts"`
	NextRetry        time.Time `json:"nextRetry,omitzero"`
	Force            bool      `json:"force,omitempty"`
	KeepWorkspace    bool      `json:"keepWorkspace,omitempty"`
	Transitions      []Record  `json:"transitions"`
}

// Machine is one sandbox's lifecycle. Not safe for concurrent use: it
// belongs to the sandbox actor.
type Machine struct {
	cfg   Config
	clock Clock
	rnd   Rand

	phase    Phase
	reason   Reason
	cause    Reason // the failure being recovered from; kept through RecoveryExhausted
	message  string
	since    time.Time
	attempts int
	timer    Timer
	seq      uint64
	force    bool // the stop in progress is stop --force
	keep     bool // the delete in progress keeps the workspace
	history  []Record

	out Transition // the step being built
	by  string     // who asked for the step being built
}

func newMachine(cfg Config, opts []Option) *Machine {
	m := &Machine{cfg: cfg.withDefaults(), clock: SystemClock{}}
	for _, o := range opts {
		o(m)
	}
	if m.rnd == nil {
		seed := uint64(m.clock.Now().UnixNano())
		m.rnd = rand.New(rand.NewPCG(seed, seed>>17|1))
	}
	return m
}

// New returns a machine for a sandbox not created yet (PhaseNone); apply
// VerbCreate to it.
func New(cfg Config, opts ...Option) *Machine { return newMachine(cfg, opts) }

// Restore rebuilds a machine from a persisted snapshot after a gateway or
// actor restart and adopts the sandbox: supervisorAlive says whether its
// supervisor process still runs. The returned Transition re-arms what the
// phase needs (a reconnect grace, a retry, the stop or delete in progress)
// so nothing stays in Provisioning or Recovering without a timer; by
// names the node that adopts it (its records).
func Restore(s Snapshot, cfg Config, supervisorAlive bool, by string, opts ...Option) (*Machine, Transition, error) {
	if !slices.Contains(Phases(), s.Phase) {
		return nil, Transition{}, fmt.Errorf("lifecycle: restore: invalid phase %s", s.Phase)
	}
	m := newMachine(cfg, opts)
	m.phase, m.reason, m.cause, m.message, m.since = s.Phase, s.Reason, s.Cause, s.Message, s.Since
	m.attempts, m.force, m.keep = s.RecoveryAttempts, s.Force, s.KeepWorkspace
	m.history = slices.Clone(s.Transitions)
	if len(m.history) > HistoryLen {
		m.history = m.history[len(m.history)-HistoryLen:]
	}
	t, err := m.step(by, func() error { return m.adopt(supervisorAlive) })
	if err != nil {
		return nil, Transition{}, err
	}
	return m, t, nil
}

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// Clone returns an independent copy: a step can be taken on the copy and
// the copy kept only once its state is persisted (persist, then apply).
func (m *Machine) Clone() *Machine {
	c := *m
	c.history = slices.Clone(m.history)
	return &c
}

// Snapshot returns the state to persist and show.
func (m *Machine) Snapshot() Snapshot {
	s := Snapshot{
		Phase: m.phase, Reason: m.reason, Cause: m.cause, Message: m.message, Since: m.since,
		RecoveryAttempts: m.attempts, Force: m.force, KeepWorkspace: m.keep,
		Transitions: slices.Clone(m.history),
	}
	if m.timer.Kind == TimerRetry || m.timer.Kind == TimerGrace {
		s.NextRetry = m.timer.At
	}
	return s
}

// Accepts reports whether phase p accepts verb v (DESIGN.md's table).
func Accepts(p Phase, v Verb) bool { return accepts(p, v) }

// Check reports whether verb v works in the current phase, without
// changing anything: nil or a *RefusedError.
func (m *Machine) Check(v Verb) error {
	if accepts(m.phase, v) {
		return nil
	}
	return &RefusedError{Phase: m.phase, Verb: v, Hint: m.hint(v)}
}

func (m *Machine) hint(v Verb) string {
	if v == VerbCreate && m.phase != PhaseDeleting {
		return "use delete first, or choose another name"
	}
	return stateOf(m.phase).advice(v)
}

// Apply applies a client verb, asked for by by (the client's identity,
// recorded in the transitions it makes). A verb the phase does not accept
// returns a *RefusedError and changes nothing. Reads, exec and connect
// change nothing either (the Transition has From == To and no Action).
func (m *Machine) Apply(v Verb, by string) (Transition, error) {
	if !v.valid() {
		return Transition{}, fmt.Errorf("lifecycle: unknown verb %d", int(v))
	}
	if err := m.Check(v); err != nil {
		return Transition{}, err
	}
	return m.step(by, func() error {
		switch v {
		case VerbCreate:
			return m.start("created")
		case VerbStart:
			return m.start("start requested")
		case VerbStop, VerbStopForce:
			return m.stop(v == VerbStopForce)
		case VerbRecover:
			if err := m.move(PhaseRecovering, m.cause, "recover requested"); err != nil {
				return err
			}
			m.attempts = 0
			m.attempt()
		case VerbDelete, VerbDeleteKeepWorkspace:
			m.keep = v == VerbDeleteKeepWorkspace
			if err := m.move(PhaseDeleting, ReasonNone, v.String()+" requested"); err != nil {
				return err
			}
			m.out.Action = m.deleteAction()
		}
		return nil
	})
}

// On applies an internal event, reported by by (recorded in the
// transitions it makes: "gateway:NODE", "supervisor:NAME"). Reports that
// no longer matter (a failure of something already stopped, a stale timer)
// change nothing and return no error; an event that makes no sense here
// returns *UnexpectedEventError.
func (m *Machine) On(e Event, by string) (Transition, error) {
	return m.step(by, func() error {
		switch e := e.(type) {
		case SessionUp:
			return m.sessionUp(e)
		case WorkloadExited:
			return m.exited(e.Code, e.Detail)
		case RecoveryAttemptFailed:
			if m.phase != PhaseRecovering {
				return &UnexpectedEventError{Phase: m.phase, Event: e}
			}
			if e.Permanent {
				return m.cannotStart(e.Detail)
			}
			return m.fail(orReason(m.cause, ReasonStartFailed), e.Detail)
		case StartFailed:
			if e.Permanent {
				return m.cannotStart(e.Detail)
			}
			return m.fail(e.failure())
		case failureEvent:
			return m.fail(e.failure())
		case TimerFired:
			return m.fired(e.Seq)
		case StopDone:
			if m.phase == PhaseDeleting {
				return nil
			}
			if m.phase != PhaseStopping {
				return &UnexpectedEventError{Phase: m.phase, Event: e}
			}
			return m.move(PhaseStopped, ReasonNone, "stopped")
		case DeleteDone:
			if m.phase != PhaseDeleting {
				return &UnexpectedEventError{Phase: m.phase, Event: e}
			}
			m.out.Done = true
			return nil
		}
		return &UnexpectedEventError{Phase: m.phase, Event: e}
	})
}

// step runs f as one atomic step, asked for by by: on error the machine
// is left as it was. Every step names who asked: an empty by is refused.
func (m *Machine) step(by string, f func() error) (Transition, error) {
	if by == "" {
		return Transition{}, errors.New("lifecycle: a step that names no one who asked for it (a client, the gateway or the supervisor)")
	}
	saved := *m
	m.out, m.by = Transition{From: m.phase}, by
	if err := f(); err != nil {
		*m = saved
		return Transition{}, err
	}
	t := m.out
	t.To, t.Reason, t.Message = m.phase, m.reason, m.message
	m.out, m.by = Transition{}, ""
	return t, nil
}

// TimerPending reports whether the machine waits for a timer; when it does
// not, a timer the actor still has armed can only fire stale.
func (m *Machine) TimerPending() bool { return m.timer.Kind != TimerNone }

// move changes phase, records it and voids the current timer. A move the
// phase's type does not list is a bug in this package and fails the step.
func (m *Machine) move(to Phase, r Reason, msg string) error {
	if !slices.Contains(stateOf(m.phase).next(), to) {
		return fmt.Errorf("lifecycle: internal error: no transition %s -> %s", m.phase, to)
	}
	now := m.clock.Now()
	rec := Record{From: m.phase, To: to, Reason: r, Message: msg, At: now, By: m.by}
	m.phase, m.reason, m.message, m.since = to, r, msg, now
	m.timer, m.out.Timer = Timer{}, Timer{}
	m.history = append(m.history, rec)
	if len(m.history) > HistoryLen {
		m.history = m.history[len(m.history)-HistoryLen:]
	}
	m.out.Records = append(m.out.Records, rec)
	return nil
}

func (m *Machine) arm(k TimerKind, d time.Duration) {
	m.seq++
	m.timer = Timer{Seq: m.seq, Kind: k, At: m.clock.Now().Add(d)}
	m.out.Timer = m.timer
}

// inFlight reports whether a supervisor started on our behalf may be
// running and reporting: starting, Ready, or a recovery attempt.
func (m *Machine) inFlight() bool {
	return m.phase == PhaseProvisioning || m.phase == PhaseReady ||
		(m.phase == PhaseRecovering && m.timer.Kind == TimerStart)
}

func (m *Machine) start(msg string) error {
	if err := m.move(PhaseProvisioning, ReasonNone, msg); err != nil {
		return err
	}
	m.attempts, m.cause = 0, ReasonNone
	m.spawn()
	return nil
}

func (m *Machine) spawn() {
	m.out.Action = ActionSpawn
	m.arm(TimerStart, m.cfg.StartTimeout)
}

// attempt starts one recovery attempt.
func (m *Machine) attempt() {
	m.attempts++
	m.message = fmt.Sprintf("recovery attempt %d of %d: respawning the supervisor", m.attempts, MaxRecoveryAttempts)
	m.spawn()
}

func (m *Machine) stop(force bool) error {
	msg := "stop requested"
	if force {
		msg = "stop --force requested"
	}
	if m.phase == PhaseStopping { // escalation of a stop in progress
		m.message = msg
	} else if err := m.move(PhaseStopping, ReasonNone, msg); err != nil {
		return err
	}
	m.force = force
	m.out.Action = m.stopAction()
	return nil
}

func (m *Machine) stopAction() Action {
	if m.force {
		return ActionKill
	}
	return ActionStop
}

func (m *Machine) deleteAction() Action {
	if m.keep {
		return ActionDeleteKeepWorkspace
	}
	return ActionDelete
}

func (m *Machine) sessionUp(e SessionUp) error {
	switch m.phase {
	case PhaseProvisioning, PhaseRecovering:
		msg := "running"
		if m.phase == PhaseRecovering {
			msg = fmt.Sprintf("running again, recovered from %s after %d attempt(s)", m.cause, m.attempts)
		}
		if err := m.move(PhaseReady, ReasonNone, msg); err != nil {
			return err
		}
		m.cause = ReasonNone
		if m.attempts > 0 {
			m.arm(TimerStable, m.cfg.StableAfter)
		}
		return nil
	case PhaseReady, PhaseStopping, PhaseDeleting:
		return nil // a duplicate, or a supervisor about to be stopped
	}
	return &UnexpectedEventError{Phase: m.phase, Event: e}
}

func (m *Machine) exited(code int, detail string) error {
	if !m.inFlight() {
		return nil
	}
	if code != 0 {
		msg := fmt.Sprintf("workload exited with code %d", code)
		if detail != "" {
			msg = detail + ": " + msg
		}
		return m.fail(ReasonWorkloadFailed, msg)
	}
	if err := m.move(PhaseCompleted, ReasonNone, "workload exited with code 0"); err != nil {
		return err
	}
	if m.cfg.Restart != RestartAlways {
		m.out.Action = ActionReap
		return nil
	}
	if m.attempts >= MaxRecoveryAttempts {
		m.message = fmt.Sprintf("workload exited with code 0; restart: always gave up after %d quick restarts in a row; use start", MaxRecoveryAttempts)
		m.out.Action = ActionReap
		return nil
	}
	return m.retryLater(ReasonNone, "workload exited with code 0; restart: always")
}

// fail handles a failure with reason r.
func (m *Machine) fail(r Reason, detail string) error {
	if detail == "" {
		detail = r.String()
	}
	if m.phase == PhaseRecovering && m.timer.Kind == TimerGrace && r != ReasonSessionLost {
		// The supervisor we were waiting for failed or is gone: back off.
		return m.retryLater(r, detail)
	}
	if !m.inFlight() {
		return nil // nothing of ours runs: a late report
	}
	if (r == ReasonWorkloadFailed || r == ReasonStartFailed) && m.cfg.Restart == RestartNever {
		return m.giveUp(r, detail+"; restart: never (use start or recover)")
	}
	if m.attempts >= MaxRecoveryAttempts {
		return m.exhaust(r, detail)
	}
	if m.phase == PhaseRecovering {
		return m.retryLater(r, detail) // a failed attempt
	}
	if err := m.move(PhaseError, r, detail); err != nil {
		return err
	}
	if r == ReasonSessionLost {
		return m.awaitReconnect(detail)
	}
	return m.retryLater(r, detail)
}

// CannotStartHint ends the message of a start that cannot succeed by
// retrying: what works from Error/StartFailed.
const CannotStartHint = "not retried: a retry would fail the same way; fix the cause, then use start or recover (or delete)"

// cannotStart handles a start that fails the same way whatever the number
// of retries: Error/StartFailed with no retry timer.
func (m *Machine) cannotStart(detail string) error {
	if detail == "" {
		detail = "the sandbox cannot start"
	}
	starting := m.phase == PhaseProvisioning || (m.phase == PhaseRecovering && m.timer.Kind == TimerStart)
	if !starting {
		// Not about a start in flight (the session came up, or nothing
		// of ours runs): handled as any start failure.
		return m.fail(ReasonStartFailed, detail)
	}
	return m.giveUp(ReasonStartFailed, detail+"; "+CannotStartHint)
}

// giveUp moves to Error with reason r and no timer: the failure is not
// retried automatically (restart: never, or it cannot heal); start,
// recover, stop and delete work from there.
func (m *Machine) giveUp(r Reason, msg string) error {
	m.cause = r
	if err := m.move(PhaseError, r, msg); err != nil {
		return err
	}
	m.out.Action = ActionReap
	return nil
}

// retryLater moves to (or stays in) Recovering and schedules the next
// attempt after the backoff.
func (m *Machine) retryLater(r Reason, detail string) error {
	d := time.Duration(float64(Backoff(m.attempts, m.rnd)) * m.cfg.BackoffScale)
	msg := fmt.Sprintf("%s; recovery attempt %d of %d in %s", detail, m.attempts+1, MaxRecoveryAttempts, d.Round(time.Millisecond))
	if err := m.move(PhaseRecovering, r, msg); err != nil {
		return err
	}
	m.cause = r
	m.arm(TimerRetry, d)
	return nil
}

func (m *Machine) awaitReconnect(detail string) error {
	msg := fmt.Sprintf("%s; waiting %s for the supervisor to reconnect", detail, m.cfg.Grace)
	if err := m.move(PhaseRecovering, ReasonSessionLost, msg); err != nil {
		return err
	}
	m.cause = ReasonSessionLost
	m.arm(TimerGrace, m.cfg.Grace)
	return nil
}

func (m *Machine) exhaust(r Reason, detail string) error {
	m.cause = r
	msg := fmt.Sprintf("%d recovery attempts failed in a row, the last with %s (%s); no more automatic tries: use recover or start",
		MaxRecoveryAttempts, r, detail)
	if err := m.move(PhaseError, ReasonRecoveryExhausted, msg); err != nil {
		return err
	}
	m.out.Action = ActionReap
	return nil
}

func (m *Machine) fired(seq uint64) error {
	if seq == 0 || seq != m.timer.Seq {
		return nil // stale
	}
	switch m.timer.Kind {
	case TimerRetry:
		m.attempt()
	case TimerGrace:
		msg := fmt.Sprintf("the supervisor did not reconnect within %s; respawning it", m.cfg.Grace)
		if err := m.move(PhaseRecovering, m.cause, msg); err != nil {
			return err
		}
		m.attempt()
	case TimerStart:
		return m.fail(ReasonStartFailed, fmt.Sprintf("the supervisor's session was not up within %s", m.cfg.StartTimeout))
	case TimerStable:
		m.attempts, m.timer = 0, Timer{}
	}
	return nil
}

// adopt re-arms what the restored phase needs.
func (m *Machine) adopt(alive bool) error {
	switch m.phase {
	case PhaseProvisioning:
		if alive {
			m.arm(TimerStart, m.cfg.StartTimeout)
		} else {
			m.spawn()
		}
	case PhaseReady:
		if alive {
			return m.fail(ReasonSessionLost, "session lost at "+m.adoption())
		}
		return m.fail(ReasonSupervisorLost, "supervisor gone at "+m.adoption())
	case PhaseRecovering:
		switch {
		case alive:
			m.cause = orReason(m.cause, ReasonSessionLost)
			if err := m.move(PhaseRecovering, m.cause, "after "+m.adoption()+"; waiting for the supervisor to reconnect"); err != nil {
				return err
			}
			m.arm(TimerGrace, m.cfg.Grace)
		case m.attempts >= MaxRecoveryAttempts:
			return m.exhaust(orReason(m.cause, ReasonSupervisorLost), "supervisor gone at "+m.adoption())
		default:
			return m.retryLater(orReason(m.cause, ReasonSupervisorLost), "supervisor gone at "+m.adoption())
		}
	case PhaseStopping:
		m.out.Action = m.stopAction()
	case PhaseDeleting:
		m.out.Action = m.deleteAction()
	default:
		if alive {
			m.out.Action = ActionReap
		}
	}
	return nil
}

// adoption names what made this machine adopt its sandbox.
func (m *Machine) adoption() string {
	if m.cfg.Adoption != "" {
		return m.cfg.Adoption
	}
	return "gateway restart"
}

// orReason returns r, or def when r is ReasonNone.
func orReason(r, def Reason) Reason {
	if r == ReasonNone {
		return def
	}
	return r
}
