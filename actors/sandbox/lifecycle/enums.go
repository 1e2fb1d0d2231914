package lifecycle

import "fmt"

// Phase is a sandbox phase. Values are explicit and stable; the store and
// `sandbox get -o json` use the names (MarshalText), not the numbers.
type Phase int

// The phases of DESIGN.md. PhaseNone is the zero value: a machine that has
// not been created yet (it only appears as the From of the first record).
const (
	PhaseNone         Phase = 0
	PhaseProvisioning Phase = 1
	PhaseReady        Phase = 2
	PhaseStopping     Phase = 3
	PhaseStopped      Phase = 4
	PhaseCompleted    Phase = 5
	PhaseError        Phase = 6
	PhaseRecovering   Phase = 7
	PhaseDeleting     Phase = 8
)

func phaseNames() []string {
	return []string{"None", "Provisioning", "Ready", "Stopping", "Stopped", "Completed", "Error", "Recovering", "Deleting"}
}

// Phases returns the eight phases of DESIGN.md in order (not PhaseNone).
func Phases() []Phase {
	return []Phase{PhaseProvisioning, PhaseReady, PhaseStopping, PhaseStopped, PhaseCompleted, PhaseError, PhaseRecovering, PhaseDeleting}
}

// String returns the phase's name as DESIGN.md spells it.
func (p Phase) String() string { return enumName(int(p), phaseNames(), "phase") }

// MarshalText encodes the phase by name.
func (p Phase) MarshalText() ([]byte, error) { return enumText(int(p), phaseNames(), "phase") }

// UnmarshalText decodes a phase name.
func (p *Phase) UnmarshalText(b []byte) error {
	return enumParse((*int)(p), string(b), phaseNames(), "phase")
}

// Reason says why a sandbox is in Error (or Recovering). Values are explicit
// and stable.
type Reason int

// The Error reasons of DESIGN.md. ReasonNone is encoded as "" in JSON.
const (
	ReasonNone              Reason = 0
	ReasonStartFailed       Reason = 1
	ReasonSupervisorLost    Reason = 2
	ReasonSessionLost       Reason = 3
	ReasonWorkloadFailed    Reason = 4
	ReasonBoundaryFailed    Reason = 5
	ReasonNodeLost          Reason = 6
	ReasonRecoveryExhausted Reason = 7
)

func reasonNames() []string {
	return []string{"None", "StartFailed", "SupervisorLost", "SessionLost", "WorkloadFailed", "BoundaryFailed", "NodeLost", "RecoveryExhausted"}
}

// String returns the reason's name ("None" for ReasonNone).
func (r Reason) String() string { return enumName(int(r), reasonNames(), "reason") }

// MarshalText encodes the reason by name, ReasonNone as "".
func (r Reason) MarshalText() ([]byte, error) {
	if r == ReasonNone {
		return []byte{}, nil
	}
	return enumText(int(r), reasonNames(), "reason")
}

// UnmarshalText decodes a reason name; "" is ReasonNone.
func (r *Reason) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = ReasonNone
		return nil
	}
	return enumParse((*int)(r), string(b), reasonNames(), "reason")
}

// Verb is a client verb as far as the lifecycle is concerned. Values are
// explicit and stable.
type Verb int

// The verbs of DESIGN.md's client section that touch one sandbox. get and
// logs are reads and work in every phase.
const (
	VerbCreate              Verb = 1
	VerbStart               Verb = 2
	VerbStop                Verb = 3
	VerbStopForce           Verb = 4
	VerbRecover             Verb = 5
	VerbDelete              Verb = 6
	VerbDeleteKeepWorkspace Verb = 7
	VerbExec                Verb = 8
	VerbConnect             Verb = 9
	VerbLogs                Verb = 10
	VerbGet                 Verb = 11
)

func verbNames() []string {
	return []string{"", "create", "start", "stop", "stop --force", "recover", "delete", "delete --keep-workspace", "exec", "connect", "logs", "get"}
}

// Verbs returns every verb in order.
func Verbs() []Verb {
	return []Verb{VerbCreate, VerbStart, VerbStop, VerbStopForce, VerbRecover, VerbDelete, VerbDeleteKeepWorkspace, VerbExec, VerbConnect, VerbLogs, VerbGet}
}

// String returns the verb as a user types it, e.g. "stop --force".
func (v Verb) String() string { return enumName(int(v), verbNames(), "verb") }

func (v Verb) valid() bool { return v >= VerbCreate && v <= VerbGet }

// read reports whether the verb only reads (allowed in every phase).
func (v Verb) read() bool { return v == VerbLogs || v == VerbGet }

// RestartPolicy says what happens when the workload exits. The zero value
// is the default, on-failure.
type RestartPolicy int

// Restart policies (DESIGN.md: `restart: always|on-failure|never`).
const (
	RestartOnFailure RestartPolicy = 0
	RestartAlways    RestartPolicy = 1
	RestartNever     RestartPolicy = 2
)

func restartNames() []string { return []string{"on-failure", "always", "never"} }

// String returns the policy as written in a spec.
func (r RestartPolicy) String() string { return enumName(int(r), restartNames(), "restart") }

// MarshalText encodes the policy by name.
func (r RestartPolicy) MarshalText() ([]byte, error) {
	return enumText(int(r), restartNames(), "restart")
}

// UnmarshalText decodes a policy name; "" is the default, on-failure.
func (r *RestartPolicy) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = RestartOnFailure
		return nil
	}
	return enumParse((*int)(r), string(b), restartNames(), "restart")
}

// ParseRestartPolicy parses "always", "on-failure", "never" or "" (default).
func ParseRestartPolicy(s string) (RestartPolicy, error) {
	var r RestartPolicy
	err := r.UnmarshalText([]byte(s))
	return r, err
}

// Action is what the sandbox actor must do after a step. Values are
// explicit and stable.
type Action int

// Actions.
const (
	// ActionNone: nothing to do.
	ActionNone Action = 0
	// ActionSpawn: make sure no earlier supervisor of this sandbox runs
	// (kill it), then start supervisor and workload on the existing
	// workspace. The machine arms a TimerStart with it; report SessionUp,
	// StartFailed or WorkloadExited.
	ActionSpawn Action = 1
	// ActionStop: stop gracefully (workload first, then supervisor), then
	// report StopDone.
	ActionStop Action = 2
	// ActionKill: kill at once, without grace, then report StopDone.
	ActionKill Action = 3
	// ActionReap: kill whatever may remain of this sandbox; report nothing.
	ActionReap Action = 4
	// ActionDelete: kill, remove the workspace and the record, then report
	// DeleteDone.
	ActionDelete Action = 5
	// ActionDeleteKeepWorkspace: as ActionDelete but keep the workspace.
	ActionDeleteKeepWorkspace Action = 6
)

func actionNames() []string {
	return []string{"none", "spawn", "stop", "kill", "reap", "delete", "delete-keep-workspace"}
}

// String returns the action's name.
func (a Action) String() string { return enumName(int(a), actionNames(), "action") }

// TimerKind says what a timer is for. Values are explicit and stable.
type TimerKind int

// Timer kinds.
const (
	TimerNone TimerKind = 0
	// TimerRetry: the backoff before the next recovery attempt.
	TimerRetry TimerKind = 1
	// TimerGrace: how long to wait for a lost session's supervisor to
	// reconnect before respawning it.
	TimerGrace TimerKind = 2
	// TimerStart: how long a start or recovery attempt may take to bring
	// the session up.
	TimerStart TimerKind = 3
	// TimerStable: how long Ready must last after a recovery before the
	// attempt count resets.
	TimerStable TimerKind = 4
)

func timerNames() []string { return []string{"none", "retry", "grace", "start", "stable"} }

// String returns the timer kind's name.
func (k TimerKind) String() string { return enumName(int(k), timerNames(), "timer") }

func enumName(v int, names []string, kind string) string {
	if v >= 0 && v < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

func enumText(v int, names []string, kind string) ([]byte, error) {
	if v < 0 || v >= len(names) || names[v] == "" {
		return nil, fmt.Errorf("lifecycle: %s %d has no name", kind, v)
	}
	return []byte(names[v]), nil
}

func enumParse(dst *int, s string, names []string, kind string) error {
	for i, n := range names {
		if n != "" && n == s {
			*dst = i
			return nil
		}
	}
	return fmt.Errorf("lifecycle: unknown %s %q", kind, s)
}
