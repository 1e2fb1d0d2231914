package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
)

// waitPoll is how often a waiting verb asks the gateway (one connection).
const waitPoll = 250 * time.Millisecond

// waitHelp is the Long text every waiting verb shares.
const waitHelp = `The verb prints the phase the gateway answered, then waits for its outcome
and prints every change on the way (phase/reason, attempt, time since the
verb was sent, message). It returns as soon as the outcome is known: exit 0
when it is reached (Ready or Completed for create, start and recover;
Stopped for stop; gone for delete), 1 when the sandbox ends in Error (the
reason and message say why, and what to do), is stopped or deleted by
someone else meanwhile, or --timeout passes. --no-wait returns at once.`

// waitOpts are the flags of a verb that waits for its outcome.
type waitOpts struct {
	noWait  bool
	timeout time.Duration
}

func (w *waitOpts) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&w.noWait, "no-wait", false, "return once the gateway accepted the verb, without waiting for its outcome")
	cmd.Flags().DurationVar(&w.timeout, "timeout", 2*time.Minute, "how long to wait for the outcome (then exit 1)")
}

// goal is the outcome a verb waits for.
type goal int

const (
	goalReady   goal = iota // create, start, recover: Ready (or Completed)
	goalStopped             // stop
	goalGone                // delete
)

func goalOf(v messages.Verb) goal {
	switch v {
	case messages.Verb_VERB_STOP, messages.Verb_VERB_STOP_FORCE:
		return goalStopped
	case messages.Verb_VERB_DELETE, messages.Verb_VERB_DELETE_KEEP_WORKSPACE:
		return goalGone
	}
	return goalReady
}

func (g goal) String() string {
	return [...]string{"Ready", "Stopped", "deleted"}[g]
}

// outcome decides, from one status, whether the wait is over: done, or a
// failure (exit 1) that names the phase and what to do.
func (g goal) outcome(st *messages.SandboxStatus) (done bool, err error) {
	name := st.Name
	switch g {
	case goalReady:
		switch st.Phase {
		case "Ready", "Completed":
			return true, nil
		case "Error":
			hint := fmt.Sprintf("stockade sandbox logs %s shows the workload's output", name)
			if !strings.Contains(st.Message, "start") { // the gateway's message usually says what to do
				hint += fmt.Sprintf("; fix the cause, then stockade sandbox start %s (or delete %s)", name, name)
			}
			return false, &exitError{exitFailure, fmt.Errorf("sandbox %s: Error/%s: %s\n(%s)", name, st.Reason, st.Message, hint)}
		case "Stopping", "Stopped", "Deleting":
			return false, &exitError{exitFailure, fmt.Errorf("sandbox %s is %s: stopped or deleted by another client while this one waited for Ready", name, st.Phase)}
		}
	case goalStopped:
		switch st.Phase {
		case "Stopped":
			return true, nil
		case "Deleting":
			return false, &exitError{exitFailure, fmt.Errorf("sandbox %s is Deleting: deleted by another client while this one waited for Stopped", name)}
		}
	}
	return false, nil
}

// shown is what a wait or a watch prints a line for when it changes.
type shown struct {
	phase, reason, message string
	attempts               int32
	supervisor, workload   int32
}

func shownOf(st *messages.SandboxStatus) shown {
	return shown{st.Phase, st.Reason, st.Message, st.RecoveryAttempts, st.SupervisorPid, st.WorkloadPid}
}

// progressLine is one line of a wait:
//
//	demo: Recovering/StartFailed (attempt 2 of 10, +3.1s): <message>
func progressLine(st *messages.SandboxStatus, elapsed time.Duration) string {
	line := st.Name + ": " + st.Phase
	if st.Reason != "" {
		line += "/" + st.Reason
	}
	line += " ("
	if st.RecoveryAttempts > 0 {
		line += fmt.Sprintf("attempt %d of %d, ", st.RecoveryAttempts, lifecycle.MaxRecoveryAttempts)
	}
	line += fmt.Sprintf("+%.1fs)", elapsed.Seconds())
	if st.Message != "" {
		line += ": " + st.Message
	}
	return line
}

// waitFor polls the sandbox first describes (the verb's reply) through c
// until g's outcome is known or timeout passes, printing a line for every
// change of phase, reason, message or attempt. Statuses older than first
// (a cache that has not seen the verb yet) are skipped.
func waitFor(c *client.Client, out io.Writer, g goal, first *messages.SandboxStatus, start time.Time, timeout time.Duration) error {
	name := first.Name
	last := shownOf(first)
	last.supervisor, last.workload = 0, 0 // pids do not make a line here
	if done, err := g.outcome(first); done || err != nil {
		return err
	}
	deadline := start.Add(timeout)
	for {
		time.Sleep(waitPoll)
		reply, err := request(c, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_GET})
		switch {
		case err != nil && errdefs.Is(err, errdefs.KindNotFound):
			if g == goalGone {
				fmt.Fprintf(out, "%s: deleted (+%.1fs)\n", name, time.Since(start).Seconds())
				return nil
			}
			return &exitError{exitFailure, fmt.Errorf("sandbox %s was deleted by another client while this one waited for %s", name, g)}
		case err != nil:
			return err
		}
		st := reply.Sandbox
		if st.SinceUnixMs >= first.SinceUnixMs {
			now := shownOf(st)
			now.supervisor, now.workload = 0, 0
			if now != last {
				fmt.Fprintln(out, progressLine(st, time.Since(start)))
				last = now
			}
			if done, err := g.outcome(st); done || err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return &exitError{exitFailure, fmt.Errorf("sandbox %s is %s after %s, not %s yet (stockade sandbox get %s -w follows it; --timeout waits longer)",
				name, st.Phase, timeout, g, name)}
		}
	}
}
