package lifecycle

import (
	"fmt"
	"strings"
)

// RefusedError is a verb the current phase does not accept. Its message
// names the phase, the verb, where the verb works, and what works from
// here, e.g. "sandbox is Provisioning: start works from Stopped, Completed
// or Error; it is starting; wait for Ready, or use stop to cancel the
// start". The CLI maps it to exit code 4.
type RefusedError struct {
	Phase Phase
	Verb  Verb
	// Hint says what works from Phase instead.
	Hint string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("sandbox is %s: %s; %s", e.Phase, WorksFrom(e.Verb), e.Hint)
}

// WorksFrom says in which phases a verb works, e.g. "start works from
// Stopped, Completed or Error", computed from the phase types.
func WorksFrom(v Verb) string {
	if v == VerbCreate {
		return "create works only for a name not in use"
	}
	var in, out []string
	for _, p := range Phases() {
		if accepts(p, v) {
			in = append(in, p.String())
		} else {
			out = append(out, p.String())
		}
	}
	switch {
	case len(out) == 0:
		return fmt.Sprintf("%s works in every phase", v)
	case len(out) == 1:
		return fmt.Sprintf("%s works in every phase but %s", v, out[0])
	case len(in) == 1:
		return fmt.Sprintf("%s works only in %s", v, in[0])
	default:
		return fmt.Sprintf("%s works from %s or %s", v, strings.Join(in[:len(in)-1], ", "), in[len(in)-1])
	}
}

// UnexpectedEventError is an event that makes no sense in the current
// phase, e.g. a supervisor's session coming up for a Stopped sandbox (the
// actor should tell that supervisor to exit). The machine is unchanged.
type UnexpectedEventError struct {
	Phase Phase
	Event Event
}

func (e *UnexpectedEventError) Error() string {
	return fmt.Sprintf("sandbox is %s: unexpected event %s", e.Phase, e.Event)
}
