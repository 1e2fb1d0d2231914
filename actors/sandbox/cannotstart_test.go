package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/messages"
)

// TestCannotStartGoesToError: a supervisor that ends before its Hello with
// driver.ErrCannotStart puts the sandbox in Error/StartFailed at once,
// naming the path, and nothing is retried however long we wait; start
// tries again (and works once the cause is fixed). A supervisor that
// crashed before its Hello for another reason is retried as before.
func TestCannotStartGoesToError(t *testing.T) {
	w := newWorld(t)
	if r := w.create("c"); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("create: %v", r)
	}
	w.proc("c").Exit(fmt.Errorf("%w: the command /no/such/bin does not exist in the sandbox: check the path", driver.ErrCannotStart))
	w.waitPhase("c", "Error")
	st := w.get("c").Sandbox
	if st.Reason != "StartFailed" || !strings.Contains(st.Message, "/no/such/bin") || !strings.Contains(st.Message, "use start or recover") ||
		st.NextRetryUnixMs != 0 || st.RecoveryAttempts != 0 {
		t.Fatalf("after a permanent start failure: %s/%s %q next %d attempts %d", st.Phase, st.Reason, st.Message, st.NextRetryUnixMs, st.RecoveryAttempts)
	}
	if rec := w.mustRecord("c"); rec.Lifecycle.Reason.String() != "StartFailed" {
		t.Fatalf("record: %+v", rec.Lifecycle)
	}
	w.clock.Advance(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if n := len(w.drv.Procs("c")); n != 1 || w.phase("c") != "Error" {
		t.Fatalf("retried: %d supervisors, phase %s", n, w.phase("c"))
	}
	// start: a new attempt, which works once the command exists.
	if r := w.verb("c", messages.Verb_VERB_START); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("start from Error/StartFailed: %v", r)
	}
	w.waitFor("a second supervisor", func() bool { return len(w.drv.Procs("c")) == 2 })
	w.hello("c")
	w.waitPhase("c", "Ready")

	// Not permanent (a crash before Hello): retried with a backoff.
	if r := w.create("crash"); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("create: %v", r)
	}
	w.proc("crash").Exit(errors.New("supervisor exited: signal: killed"))
	w.waitPhase("crash", "Recovering")
	if st := w.get("crash").Sandbox; st.Reason != "StartFailed" || st.NextRetryUnixMs == 0 {
		t.Fatalf("a crash before Hello: %s/%s next %d", st.Phase, st.Reason, st.NextRetryUnixMs)
	}
}

// TestCannotStartDuringRecovery: a recovery attempt that cannot start
// ends the recovery in Error/StartFailed instead of backing off.
func TestCannotStartDuringRecovery(t *testing.T) {
	w := newWorld(t)
	w.ready("r")
	w.proc("r").Exit(errors.New("supervisor exited: signal: killed"))
	w.waitPhase("r", "Recovering")
	w.clock.Advance(time.Minute) // the retry timer: a new supervisor
	w.waitFor("the recovery's supervisor", func() bool { return len(w.drv.Procs("r")) == 2 })
	w.proc("r").Exit(fmt.Errorf("%w: execve /bin/sh: permission denied: the policy's filesystem_policy does not allow executing it", driver.ErrCannotStart))
	w.waitPhase("r", "Error")
	if st := w.get("r").Sandbox; st.Reason != "StartFailed" || !strings.Contains(st.Message, "execve /bin/sh: permission denied") || st.NextRetryUnixMs != 0 {
		t.Fatalf("after the attempt: %s/%s %q next %d", st.Phase, st.Reason, st.Message, st.NextRetryUnixMs)
	}
	w.clock.Advance(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if n := len(w.drv.Procs("r")); n != 2 {
		t.Fatalf("retried after a permanent failure: %d supervisors", n)
	}
}

// TestRestartNeverStartFailed: restart: never is honoured for a start
// failure: Error/StartFailed, no retry.
func TestRestartNeverStartFailed(t *testing.T) {
	w := newWorld(t)
	if r := w.ask(&messages.CreateRequest{Name: "n", Policy: []byte("version: 1\n"), Restart: "never"}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("create: %v", r)
	}
	w.proc("n").Exit(errors.New("supervisor exited: signal: killed"))
	w.waitPhase("n", "Error")
	if st := w.get("n").Sandbox; st.Reason != "StartFailed" || !strings.Contains(st.Message, "restart: never") {
		t.Fatalf("restart never: %s/%s %q", st.Phase, st.Reason, st.Message)
	}
	w.clock.Advance(time.Hour)
	time.Sleep(50 * time.Millisecond)
	if n := len(w.drv.Procs("n")); n != 1 {
		t.Fatalf("restart never retried: %d supervisors", n)
	}
}
