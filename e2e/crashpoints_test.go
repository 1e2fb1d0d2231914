package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stockade-dev/stockade/internal/testworld"
	"github.com/stockade-dev/stockade/store"
)

// TestCrashAtEveryStoreWrite is issue 5's "gateway restart at every step":
// a scenario walks the lifecycle (create, stop, start, supervisor SIGKILL
// and recovery, create --no-wait, stop --force, delete, a session cut
// that reconnects within the grace, a supervisor SIGKILL whose respawn
// fails (StartFailed) then recover, delete --keep-workspace). A clean run
// counts its store writes N. Then for each K in 0..N-1 a fresh gateway
// runs the scenario with store.committed=kill:1@K, so it SIGKILLs itself
// right after its (K+1)-th committed write; the test checks it died by
// SIGKILL with exactly K+1 writes on disk, that no acknowledged verb is
// missing from the persisted intents, restarts the gateway without the
// fault (the supervisor.start fault armed at run time dies with it), and
// requires every sandbox to converge to what its persisted intent asks for
// (running -> Ready with one supervisor, stopped -> Stopped with none,
// deleted or no record -> gone with none), no Recovering without a retry
// or an attempt in progress on the way, and the workspace file intact.
func TestCrashAtEveryStoreWrite(t *testing.T) {
	begin := time.Now()
	var base, n int
	t.Run("count", func(t *testing.T) {
		b := newCrashRun(t, -1)
		b.kill()
		base, _ = readState(t, b.stateFile())
		c := newCrashRun(t, -1)
		if r := c.runScenario(); r.crashed {
			t.Fatalf("the gateway died without a fault armed (%v) during %q", c.gwErr, r.step)
		}
		c.kill()
		txid, recs := readState(t, c.stateFile())
		if len(recs) != 0 {
			t.Fatalf("records left after the scenario: %s", describe(recs))
		}
		n = txid - base
		t.Logf("clean scenario: %d store writes; recover answered %s before the automatic retry", n, c.recoverLead.Round(time.Millisecond))
	})
	if n <= 0 {
		t.Fatalf("counted %d store writes", n)
	}
	// The crash points are independent worlds, mostly waiting on timers
	// (a session noticed lost after 3 s, a 5 s cut): they run in parallel,
	// as many as -parallel allows (GOMAXPROCS by default).
	summary := make([]string, n)
	t.Run("kill-after-write", func(t *testing.T) {
		for k := range n {
			t.Run(fmt.Sprintf("%02d", k), func(t *testing.T) {
				t.Parallel()
				summary[k] = crashAt(t, base, k)
			})
		}
	})
	t.Logf("%d crash points in %s:\n%s", n, time.Since(begin).Round(time.Millisecond), strings.Join(summary, "\n"))
}

// crashAt runs the scenario with the gateway killed after write k and
// checks the restart; it returns one summary line. The scenario's write
// count varies by one (when a supervisor's exit and its stop's completion
// reach a deleting sandbox in the other order, the exit is not persisted):
// a run that ends before its write k is tried again, twice at most.
func crashAt(t *testing.T, base, k int) string {
	var c *crashRun
	var r scenarioResult
	for attempt := 1; !r.crashed; attempt++ {
		if attempt > 3 {
			t.Fatalf("the scenario completed 3 times without the gateway dying: it made fewer than %d store writes", k+1)
		}
		if attempt > 1 {
			t.Logf("run %d ended with fewer than %d store writes; again", attempt-1, k+1)
		}
		c = newCrashRun(t, k)
		r = c.runScenario()
	}
	var ee *exec.ExitError
	if !errors.As(c.gwErr, &ee) {
		t.Fatalf("gateway exit: %v, want death by SIGKILL", c.gwErr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("gateway exit: %v, want death by SIGKILL", c.gwErr)
	}
	txid, recs := readState(t, c.stateFile())
	if got := txid - base; got != k+1 {
		t.Fatalf("the gateway died after %d store writes, want %d", got, k+1)
	}
	c.checkAcknowledged(recs)
	persisted := describe(recs)

	c.w.gwArgs = slices.DeleteFunc(slices.Clone(c.w.gwArgs), func(s string) bool { return strings.HasPrefix(s, "store.committed=") || s == "--fault" })
	c.w.startGateway()
	c.watch()
	took := c.converge(recs)
	c.checkWorkspaces(recs)
	return fmt.Sprintf("  write %02d  %-40s %-28s persisted: %-52s converged in %s",
		k, r.step, r.inFlight, persisted, took.Round(time.Millisecond))
}

// crashRun is one world running the crash scenario.
type crashRun struct {
	t     *testing.T
	w     *world
	dead  chan struct{} // closed when the current gateway process exits
	gwErr error         // its Wait error, set before dead closes
	// acked is the intent of each sandbox's last acknowledged verb;
	// pending that of a verb whose answer never came.
	acked, pending map[string]store.Intent
	precious       bool // the workspace file of sandbox a was written
	// recoverLead is how long before the automatic retry recover was
	// answered.
	recoverLead time.Duration
}

// crashGateway are the gateway's knobs. The backoff scale puts the first
// retries 0.6-4 s away: the retry after the injected StartFailed (the
// third attempt) is >= 2.5 s away, time for recover to come first. The
// grace lets a cut session reconnect instead of being respawned. The long
// stable period keeps the attempt count, and so the write count, from
// depending on how long the scenario takes. --chaos accepts the
// supervisor.start fault at run time (a restart forgets it).
func crashGateway() []string {
	return []string{"--backoff-scale", "4", "--session-grace", "10s", "--stable-after", "10m", "--chaos"}
}

func newCrashRun(t *testing.T, k int) *crashRun {
	args := crashGateway()
	if k >= 0 {
		args = append(args, "--fault", fmt.Sprintf("store.committed=kill:1@%d", k))
	}
	c := &crashRun{t: t, w: newWorld(t, 0, args...), acked: map[string]store.Intent{}, pending: map[string]store.Intent{}}
	c.watch()
	return c
}

// watch arms dead for the gateway just started. The exit status is put
// back into gwDone for the harness's killGateway and shutdown.
func (c *crashRun) watch() {
	done, dead := c.w.gwDone, make(chan struct{})
	c.dead = dead
	go func() {
		err := <-done
		c.gwErr = err
		done <- err
		close(dead)
	}()
}

func (c *crashRun) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the gateway and waits for its end (leaving its exit status
// in gwDone for the harness's shutdown).
func (c *crashRun) kill() {
	_ = c.w.gw.Process.Signal(syscall.SIGKILL)
	<-c.dead
}

func (c *crashRun) stateFile() string { return filepath.Join(c.w.state, "state.db") }

func (c *crashRun) workspace(name string) string {
	return filepath.Join(c.w.state, "sandboxes", name, "workspace")
}

// verbResult is one client run. cut: the gateway died with the request in
// flight and the client was killed (it would wait out its 30 s timeout).
type verbResult struct {
	out, errOut string
	code        int
	cut         bool
}

func (r verbResult) short() string {
	if r.cut {
		return "no answer"
	}
	return fmt.Sprintf("exit %d", r.code)
}

func (r verbResult) String() string {
	if r.cut {
		return "no answer (gateway died)"
	}
	return fmt.Sprintf("exit %d %s", r.code, strings.TrimSpace(strings.ReplaceAll(r.out+r.errOut, "\n", "; ")))
}

// run is a client verb that gives up once the gateway is dead.
func (c *crashRun) run(args ...string) verbResult {
	c.t.Helper()
	cmd := exec.Command(bin, append([]string{"sandbox", "--state-dir", c.w.state}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+c.w.addr)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("run %v: %v", args, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var r verbResult
	var err error
	select {
	case err = <-exited:
	case <-c.dead:
		select {
		case err = <-exited:
		case <-time.After(time.Second):
			_ = cmd.Process.Kill()
			err, r.cut = <-exited, true
		}
	}
	r.out, r.errOut = out.String(), errb.String()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run %v: %v", args, err)
	}
	if r.code == 5 && !r.cut {
		// The client fails at once when its connection ends, possibly
		// before the harness has reaped the gateway: give the death a
		// moment to be seen, so callers can tell a crash from a hang.
		select {
		case <-c.dead:
		case <-time.After(2 * time.Second):
		}
	}
	return r
}

// crashStatus is `sandbox get -o json` with the next retry and the times
// of the transitions.
type crashStatus struct {
	status
	NextRetry   string `json:"nextRetry"`
	Transitions []struct {
		From, To, Reason, At string
	} `json:"transitions"`
}

// lostSessionSince reports whether the history has an Error/SessionLost
// at or after t.
func (s crashStatus) lostSessionSince(t time.Time) bool {
	for _, tr := range s.Transitions {
		at, err := time.Parse(time.RFC3339Nano, tr.At)
		if err == nil && tr.To == "Error" && tr.Reason == "SessionLost" && !at.Before(t) {
			return true
		}
	}
	return false
}

// get returns the sandbox's status; found is false when it does not
// exist, ok false when no answer came because the gateway died. A live
// gateway that does not answer fails the test.
func (c *crashRun) get(name string) (s crashStatus, found, ok bool) {
	c.t.Helper()
	r := c.run("get", name, "-o", "json")
	switch {
	case (r.cut || r.code == 5) && c.isDead():
		return s, false, false
	case r.cut || r.code == 5:
		c.t.Fatalf("get %s: the gateway is alive but did not answer: %s", name, r)
	case r.code == 3:
		return s, false, true
	case r.code != 0:
		c.t.Fatalf("get %s: %s", name, r)
	}
	if err := json.Unmarshal([]byte(r.out), &s); err != nil {
		c.t.Fatalf("get %s: %v\n%s", name, err, r.out)
	}
	return s, true, true
}

// crashStep is one step of the scenario: a verb (intent 0: no client verb)
// and the condition that says its effects are over.
type crashStep struct {
	name    string
	sandbox string
	intent  store.Intent
	do      func() verbResult
	settled func() bool
}

type scenarioResult struct {
	crashed  bool
	step     string // the step during which the gateway died
	inFlight string // what its verb got
}

const scenarioScript = `date +%s%N >> /sandbox/starts; exec sleep 1000`

func (c *crashRun) scenario() []crashStep {
	verb := func(args ...string) func() verbResult { return func() verbResult { return c.run(args...) } }
	ready := func(name string, cond func(crashStatus) bool) func() bool {
		return func() bool {
			s, found, _ := c.get(name)
			return found && s.Phase == "Ready" && s.WorkloadPid != 0 && (cond == nil || cond(s))
		}
	}
	phase := func(name, want string) func() bool {
		return func() bool { s, found, _ := c.get(name); return found && s.Phase == want }
	}
	gone := func(name string) func() bool {
		return func() bool { _, found, ok := c.get(name); return ok && !found }
	}
	// killSupervisor SIGKILLs a's supervisor and keeps its pid in *pid.
	killSupervisor := func(pid *int) func() verbResult {
		return func() verbResult {
			s, found, ok := c.get("a")
			if !ok {
				return verbResult{cut: true}
			}
			if !found || s.SupervisorPid == 0 {
				c.t.Fatalf("sandbox a has no supervisor to kill: %+v", s)
			}
			*pid = s.SupervisorPid
			if err := syscall.Kill(*pid, syscall.SIGKILL); err != nil {
				c.t.Fatalf("kill supervisor %d: %v", *pid, err)
			}
			return verbResult{out: fmt.Sprintf("killed %d", *pid)}
		}
	}
	var lost, failed int // the supervisors the SIGKILL steps killed
	var cutSup int       // the supervisor whose session is cut
	var cutFrom time.Time
	var retryAt string // the automatic retry recover must come before
	return []crashStep{
		{name: "create a", sandbox: "a", intent: store.IntentRunning,
			do: verb("create", "a", "--policy", c.w.policy, "--", "/bin/sh", "-c", scenarioScript),
			settled: func() bool {
				if !ready("a", nil)() {
					return false
				}
				write(c.t, filepath.Join(c.workspace("a"), "precious"), "precious\n")
				c.precious = true
				return true
			}},
		{name: "stop a", sandbox: "a", intent: store.IntentStopped, do: verb("stop", "a"), settled: phase("a", "Stopped")},
		{name: "start a", sandbox: "a", intent: store.IntentRunning, do: verb("start", "a"), settled: ready("a", nil)},
		{name: "SIGKILL a's supervisor", sandbox: "a", do: killSupervisor(&lost),
			settled: ready("a", func(s crashStatus) bool { return s.SupervisorPid != lost })},
		{name: "create b --no-wait", sandbox: "b", intent: store.IntentRunning,
			do:      verb("create", "b", "--policy", c.w.policy, "--no-wait", "--", "/bin/sh", "-c", "exec sleep 1000"),
			settled: ready("b", nil)},
		{name: "stop --force b", sandbox: "b", intent: store.IntentStopped, do: verb("stop", "b", "--force"), settled: phase("b", "Stopped")},
		{name: "delete b", sandbox: "b", intent: store.IntentDeleted, do: verb("delete", "b"), settled: gone("b")},
		// The supervisor says nothing for 5 s; the gateway loses the
		// session after 3 (Error/SessionLost -> Recovering) and the same
		// supervisor is back within the grace.
		{name: "cut a's session", sandbox: "a",
			do: func() verbResult {
				s, found, ok := c.get("a")
				if !ok {
					return verbResult{cut: true}
				}
				if !found || s.SupervisorPid == 0 {
					c.t.Fatalf("sandbox a has no supervisor session to cut: %+v", s)
				}
				cutSup, cutFrom = s.SupervisorPid, time.Now().Truncate(time.Millisecond)
				return c.run("fault", "a", "session.silence=error:5")
			},
			settled: ready("a", func(s crashStatus) bool {
				if !s.lostSessionSince(cutFrom) {
					return false
				}
				if s.SupervisorPid != cutSup {
					c.t.Fatalf("after the session cut, supervisor %d replaced %d: respawned, not reconnected within the grace: %+v", s.SupervisorPid, cutSup, s)
				}
				return true
			})},
		{name: "arm supervisor.start=error:1", do: verb("fault", "--gateway", "supervisor.start=error:1"), settled: func() bool { return true }},
		{name: "SIGKILL a's sup., StartFailed", sandbox: "a", do: killSupervisor(&failed),
			settled: func() bool {
				s, found, _ := c.get("a")
				if found && s.Phase == "Ready" && s.SupervisorPid != failed {
					c.t.Fatalf("sandbox a was respawned without a StartFailed before recover: %+v", s)
				}
				retryAt = s.NextRetry
				return found && s.Phase == "Recovering" && s.Reason == "StartFailed" && s.NextRetry != ""
			}},
		{name: "recover a", sandbox: "a", intent: store.IntentRunning,
			do: func() verbResult {
				r := c.run("recover", "a")
				if at, err := time.Parse(time.RFC3339Nano, retryAt); err == nil && r.code == 0 {
					c.recoverLead = time.Until(at)
				}
				return r
			},
			settled: ready("a", func(s crashStatus) bool { return s.SupervisorPid != failed })},
		{name: "delete a --keep-workspace", sandbox: "a", intent: store.IntentDeleted, do: verb("delete", "a", "--keep-workspace"), settled: gone("a")},
	}
}

// runScenario runs the steps until the end or the gateway's death.
func (c *crashRun) runScenario() scenarioResult {
	c.t.Helper()
	for _, st := range c.scenario() {
		if c.isDead() {
			return scenarioResult{crashed: true, step: "between steps, before " + st.name, inFlight: "-"}
		}
		r := st.do()
		if st.intent != 0 {
			if r.cut || !strings.Contains(r.out, st.sandbox+": ") {
				c.pending[st.sandbox] = st.intent
			} else {
				c.acked[st.sandbox] = st.intent
			}
		}
		if c.isDead() {
			return scenarioResult{crashed: true, step: st.name, inFlight: "verb: " + r.short()}
		}
		if r.code != 0 {
			c.t.Fatalf("%s: %s", st.name, r)
		}
		deadline := time.Now().Add(20 * time.Second)
		for !st.settled() {
			if c.isDead() {
				return scenarioResult{crashed: true, step: st.name + ", settling", inFlight: "verb answered: " + r.short()}
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s: not settled in 20 s", st.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return scenarioResult{crashed: c.isDead(), step: "after the last step", inFlight: "-"}
}

// checkAcknowledged: every acknowledged verb is in the persisted intents;
// a verb that got no answer may or may not be.
func (c *crashRun) checkAcknowledged(recs map[string]store.Record) {
	c.t.Helper()
	for _, name := range []string{"a", "b"} {
		allowed := []store.Intent{}
		if i, ok := c.acked[name]; ok {
			allowed = append(allowed, i)
		}
		if i, ok := c.pending[name]; ok {
			allowed = append(allowed, i)
		}
		rec, ok := recs[name]
		switch {
		case !ok && (len(allowed) == 0 || slices.Contains(allowed, store.IntentDeleted) || c.acked[name] == 0):
		case !ok:
			c.t.Errorf("sandbox %s: no record after the crash, but a verb asking for %v was acknowledged", name, c.acked[name])
		case !slices.Contains(allowed, rec.Intent):
			c.t.Errorf("sandbox %s: persisted intent %v, want one of %v (acknowledged %v, unanswered %v)",
				name, rec.Intent, allowed, c.acked[name], c.pending[name])
		}
	}
	for name := range recs {
		if name != "a" && name != "b" {
			c.t.Errorf("a record for a sandbox nobody created: %s", name)
		}
	}
}

// expected is the phase a sandbox converges to for its record ("" = gone).
func expected(rec store.Record, ok bool) string {
	switch {
	case !ok || rec.Intent == store.IntentDeleted:
		return ""
	case rec.Intent == store.IntentStopped:
		return "Stopped"
	default:
		return "Ready"
	}
}

// converge polls until every sandbox is what its persisted record asks
// for, with one supervisor for a Ready sandbox and none otherwise; it
// returns how long that took.
func (c *crashRun) converge(recs map[string]store.Record) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(15 * time.Second)
	var last []string
	for {
		last = last[:0]
		sups := supervisorsByName(c.w.state)
		for _, name := range []string{"a", "b"} {
			rec, ok := recs[name]
			want := expected(rec, ok)
			s, found, answered := c.get(name)
			if !answered {
				c.t.Fatalf("the restarted gateway died: %v", c.gwErr)
			}
			if found && s.Phase == "Recovering" && s.NextRetry == "" && !strings.Contains(s.Message, "respawning") {
				c.t.Errorf("sandbox %s is Recovering with no retry scheduled and no attempt in progress: %+v", name, s)
			}
			switch {
			case want == "" && found:
				last = append(last, fmt.Sprintf("%s: %s/%s, want gone", name, s.Phase, s.Reason))
			case want != "" && !found:
				last = append(last, fmt.Sprintf("%s: gone, want %s", name, want))
			case want != "" && s.Phase != want:
				last = append(last, fmt.Sprintf("%s: %s/%s %q, want %s", name, s.Phase, s.Reason, s.Message, want))
			case want == "Ready" && (s.WorkloadPid == 0 || !slices.Equal(sups[name], []int{s.SupervisorPid})):
				last = append(last, fmt.Sprintf("%s: Ready with workload %d and supervisors %v, want one: %d", name, s.WorkloadPid, sups[name], s.SupervisorPid))
			case want != "Ready" && len(sups[name]) > 0:
				last = append(last, fmt.Sprintf("%s: supervisors %v left running, want none", name, sups[name]))
			}
		}
		if len(last) == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not converged 15 s after the restart (persisted: %s):\n%s", describe(recs), strings.Join(last, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkWorkspaces: sandbox a's file survives everything but a delete
// without --keep-workspace (the scenario only deletes a keeping it); a
// deleted b has no workspace left.
func (c *crashRun) checkWorkspaces(recs map[string]store.Record) {
	c.t.Helper()
	if c.precious {
		if b, err := os.ReadFile(filepath.Join(c.workspace("a"), "precious")); err != nil || string(b) != "precious\n" {
			c.t.Errorf("sandbox a's workspace file after the crash: %q %v", b, err)
		}
	}
	if rec, ok := recs["b"]; ok && rec.Intent == store.IntentDeleted && !rec.KeepWorkspace {
		if _, err := os.Stat(c.workspace("b")); !os.IsNotExist(err) {
			c.t.Errorf("deleted sandbox b left its workspace: %v", err)
		}
	}
}

// supervisorsByName maps sandbox names to their supervisor processes.
func supervisorsByName(state string) map[string][]int {
	out := map[string][]int{}
	prefix := filepath.Join(state, "sandboxes") + "/"
	for _, pid := range testworld.SupervisorsOf(state) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		_, rest, ok := strings.Cut(string(b), prefix)
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		out[name] = append(out[name], pid)
	}
	return out
}

// describe is the records as "a=running/Ready sup=123".
func describe(recs map[string]store.Record) string {
	if len(recs) == 0 {
		return "no records"
	}
	var parts []string
	for _, name := range []string{"a", "b"} {
		if r, ok := recs[name]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v/%s sup=%d", name, r.Intent, r.Lifecycle.Phase, r.SupervisorPID))
		}
	}
	return strings.Join(parts, " ")
}

// readState reads the state file of a dead gateway: the id of its last
// committed write transaction and its records.
func readState(t *testing.T, path string) (int, map[string]store.Record) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	recs := map[string]store.Record{}
	var txid int
	err = db.View(func(tx *bolt.Tx) error {
		txid = tx.ID()
		b := tx.Bucket([]byte("sandboxes"))
		if b == nil {
			return errors.New("no sandboxes bucket")
		}
		return b.ForEach(func(k, v []byte) error {
			var r store.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %s: %w", k, err)
			}
			recs[string(k)] = r
			return nil
		})
	})
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return txid, recs
}
