// Package lifecycle owns the sandbox state machine of DESIGN.md ("Sandbox
// lifecycle"): the phases, the Error reasons, the client verbs each phase
// accepts, the internal events (session up or lost, workload exit, timers,
// ...), the recovery backoff and the last 20 transitions.
//
// It is built containerd-shim style: one type per phase lists the verbs it
// accepts, the phases it may move to and what to tell a user whose verb it
// refuses; a refusal always names the phase, the verb, the phases where
// that verb works and a verb that works from here.
//
// The Machine is pure: no goroutines, no I/O, no timers of its own. Each
// step returns a Transition that tells the sandbox actor what to do (an
// Action such as spawning the supervisor) and which timer to arm; the actor
// feeds timer expiry back as a TimerFired event. Time comes from an
// injected Clock and jitter from an injected Rand, the two documented seams.
package lifecycle
