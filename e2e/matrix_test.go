package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testworld"
)

// TestRecoveryMatrix is issue 5's recovery matrix, end to end (gateway as
// root, real supervisors): every Error reason of DESIGN.md is produced by a
// real cause and has a path out, and every verb is applied in the phase
// each cause leaves the sandbox in. Each cell checks the verb's reply (or
// the exact refusal: exit 4, the phase, where the verb works, what works
// instead), the phase it settles in, the workspace (a file the host wrote
// at create and the workload's own run log), and a way back to Ready on the
// same workspace. Each group has its own gateway: the held groups slow the
// backoff (--backoff-scale 100: the first retry is >= 20 s away) or
// lengthen the grace so the phase stays put while the verbs land; the
// others run the whole recovery in a second.
//
// NodeLost (cluster mode) has no cause on the embedded gateway.
func TestRecoveryMatrix(t *testing.T) {
	// --chaos: the cells arm supervisor and gateway faults at run time.
	held := func(more ...string) []string { return append([]string{"--backoff-scale", "100", "--chaos"}, more...) }
	fast := func(more ...string) []string { return append([]string{"--backoff-scale", "0.01", "--chaos"}, more...) }
	for _, g := range []struct {
		name   string
		gwArgs []string
		run    func(m *matrix)
	}{
		{"Provisioning", held("--fault", "supervisor.start=delay/4s:5"), matrixProvisioning},
		{"StartFailed", held("--fault", "supervisor.start=error:4"), matrixStartFailed},
		{"SupervisorLost", held(), matrixSupervisorLost},
		{"SessionLost", held("--session-grace", "20s"), matrixSessionLost},
		{"BoundaryFailed", held(), matrixBoundaryFailed},
		{"WorkloadFailed", held(), matrixWorkloadFailed},
		{"RecoveryExhausted", fast(), matrixRecoveryExhausted},
		{"Automatic", fast("--session-grace", "2s", "--fault", "supervisor.start=error:1"), matrixAutomatic},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(&matrix{world: newWorld(t, 0, g.gwArgs...), boxes: map[string]box{}, runs: map[string]int{}})
		})
	}
}

// Workloads. Each appends a line to /sandbox/runs when it starts, so a
// respawn on the same workspace shows as one more line.
const (
	sleeper  = `echo run >> /sandbox/runs; exec sleep 1000`
	failOnce = `echo run >> /sandbox/runs; [ -f /sandbox/failed ] && exec sleep 1000; touch /sandbox/failed; exit 3`
)

// curler keeps connecting through the proxy (a proxy.listen fault fires on
// an accepted connection).
func (m *matrix) curler() string {
	return fmt.Sprintf(`echo run >> /sandbox/runs; while :; do curl -s -m 2 -o /dev/null http://api.test:%d/; sleep 0.3; done`, m.webPort)
}

// Refusal texts (DESIGN.md: the message names the phase, where the verb
// works and what works instead), spelled out as a client sees them.
const (
	hintProvisioning = "it is starting; wait for Ready, or use stop to cancel the start"
	hintRecovering   = "recovery is already restarting it; use recover to retry now, or stop to stop it"
	hintError        = "use recover to retry now, or start to start afresh, then wait for Ready"
	hintStopped      = "it is stopped; use start to run it again, or delete to remove it"
	hintReadyStart   = "it is already running; use stop, then start, to restart it"
	hintReadyRecover = "it is running and has nothing to recover; use stop, then start, to restart it"
)

func worksFrom(verb string) string {
	switch verb {
	case "start":
		return "start works from Stopped, Completed or Error"
	case "stop":
		return "stop works from Provisioning, Ready, Error or Recovering"
	case "stop --force":
		return "stop --force works from Provisioning, Ready, Stopping, Error or Recovering"
	case "recover":
		return "recover works from Error or Recovering"
	case "exec":
		return "exec works only in Ready"
	}
	return "?"
}

// replyPhase is the phase a working verb's reply shows; settlePhase the one
// it ends in ("" : the sandbox is gone).
func replyPhase(verb string) string {
	switch verb {
	case "stop", "stop --force":
		return "Stopping"
	case "start":
		return "Provisioning"
	case "recover":
		return "Recovering"
	}
	return "Deleting"
}

func settlePhase(verb string) string {
	switch verb {
	case "stop", "stop --force":
		return "Stopped"
	case "start", "recover":
		return "Ready"
	}
	return ""
}

// matrix is a world with the sandboxes of one group.
type matrix struct {
	*world
	boxes map[string]box // by name, for a re-create after delete --keep-workspace
	runs  map[string]int // lines of /sandbox/runs last seen
}

type box struct {
	name, script string
	extra        []string // create flags, e.g. --restart never
}

// mstatus is `sandbox get|list -o json` with the fields the matrix reads
// beyond the harness's status.
type mstatus struct {
	status
	NextRetry   string `json:"nextRetry"`
	Transitions []struct {
		From, To, Reason string
	} `json:"transitions"`
}

// has reports a transition from -> to with reason ("*": any).
func (s mstatus) has(from, to, reason string) bool {
	for _, tr := range s.Transitions {
		if tr.From == from && tr.To == to && (reason == "*" || tr.Reason == reason) {
			return true
		}
	}
	return false
}

// leftVia is the phase the sandbox moved to from its last entry into
// phase ("" if it did not leave it).
func (s mstatus) leftVia(phase string) string {
	last := -1
	for i, tr := range s.Transitions {
		if tr.To == phase && tr.From != phase {
			last = i
		}
	}
	if last < 0 || last+1 == len(s.Transitions) || s.Transitions[last+1].From != phase {
		return ""
	}
	return s.Transitions[last+1].To
}

func (s mstatus) String() string {
	var trs []string
	for _, tr := range s.Transitions {
		trs = append(trs, fmt.Sprintf("%s->%s(%s)", tr.From, tr.To, tr.Reason))
	}
	return fmt.Sprintf("%s/%s %q attempts=%d next=%q sup=%d [%s]", s.Phase, s.Reason, s.Message, s.RecoveryAttempts,
		s.NextRetry, s.SupervisorPid, strings.Join(trs, " "))
}

type result struct {
	out, errOut string
	code        int
}

// parallel runs client verbs at once (each call's args after `sandbox`)
// and returns their results in order.
func (m *matrix) parallel(calls ...[]string) []result {
	m.t.Helper()
	type run struct {
		cmd       *exec.Cmd
		out, errb bytes.Buffer
	}
	runs := make([]*run, len(calls))
	for i, args := range calls {
		r := &run{cmd: exec.Command(bin, append([]string{"sandbox", "--state-dir", m.state}, args...)...)}
		r.cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+m.addr)
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.errb
		if err := r.cmd.Start(); err != nil {
			m.t.Fatalf("run %v: %v", args, err)
		}
		runs[i] = r
	}
	res := make([]result, len(calls))
	for i, r := range runs {
		err := r.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res[i].code = ee.ExitCode()
		} else if err != nil {
			m.t.Fatalf("run %v: %v", calls[i], err)
		}
		res[i].out, res[i].errOut = r.out.String(), r.errb.String()
	}
	return res
}

func (m *matrix) workspace(name string) string {
	return filepath.Join(m.state, "sandboxes", name, "workspace")
}

// create creates the boxes at once (--no-wait) and, for new ones, writes
// the file `keep` into each workspace as soon as the gateway acknowledged
// the create.
func (m *matrix) create(seed bool, bs ...box) {
	m.t.Helper()
	var calls [][]string
	for _, b := range bs {
		m.boxes[b.name] = b
		args := append([]string{"create", b.name, "--policy", m.policy, "--no-wait"}, b.extra...)
		calls = append(calls, append(args, "--", "/bin/sh", "-c", b.script))
	}
	for i, r := range m.parallel(calls...) {
		name := bs[i].name
		if r.code != 0 || r.out != name+": Provisioning\n" {
			m.t.Fatalf("create %s: exit %d %q %q", name, r.code, r.out, r.errOut)
		}
		if seed {
			write(m.t, filepath.Join(m.workspace(name), "keep"), "keep "+name+"\n")
		}
	}
}

func (m *matrix) list() map[string]mstatus {
	m.t.Helper()
	out, errOut, code := m.cli("list", "-o", "json")
	if code != 0 {
		m.t.Fatalf("list: exit %d %s", code, errOut)
	}
	var all []mstatus
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		m.t.Fatalf("list: %v\n%s", err, out)
	}
	byName := map[string]mstatus{}
	for _, s := range all {
		byName[s.Name] = s
	}
	return byName
}

// await polls `list` until cond holds for every name (ok: it exists).
func (m *matrix) await(what string, timeout time.Duration, names []string, cond func(name string, s mstatus, ok bool) bool) map[string]mstatus {
	m.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all := m.list()
		var late []string
		for _, n := range names {
			s, ok := all[n]
			if !cond(n, s, ok) {
				late = append(late, fmt.Sprintf("%s: %v", n, s))
			}
		}
		if len(late) == 0 {
			return all
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("not %s within %s:\n%s", what, timeout, strings.Join(late, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *matrix) awaitPhase(phase, reason string, timeout time.Duration, names ...string) map[string]mstatus {
	m.t.Helper()
	return m.await(phase+"/"+reason, timeout, names, func(_ string, s mstatus, ok bool) bool {
		return ok && s.Phase == phase && s.Reason == reason
	})
}

// runCount is the number of times a workload started on the workspace.
func (m *matrix) runCount(name string) int {
	b, _ := os.ReadFile(filepath.Join(m.workspace(name), "runs"))
	return bytes.Count(b, []byte("run\n"))
}

// intact checks the workspace: the host's file is unchanged and no run
// line was lost.
func (m *matrix) intact(name, when string) {
	m.t.Helper()
	if b, err := os.ReadFile(filepath.Join(m.workspace(name), "keep")); err != nil || string(b) != "keep "+name+"\n" {
		m.t.Fatalf("%s: workspace of %s: keep = %q, %v", when, name, b, err)
	}
	n := m.runCount(name)
	if n < m.runs[name] {
		m.t.Fatalf("%s: workspace of %s: %d run lines, had %d", when, name, n, m.runs[name])
	}
	m.runs[name] = n
}

// ranAgain waits until a new workload started on the same workspace.
func (m *matrix) ranAgain(name, when string) {
	m.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for m.runCount(name) <= m.runs[name] {
		if time.Now().After(deadline) {
			m.t.Fatalf("%s: no new workload run on the workspace of %s (%d lines)", when, name, m.runs[name])
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.intact(name, when)
}

// refusal checks a refused verb: exit 4 and the exact message.
func (m *matrix) refusal(r result, name, phase, verb, hint string) {
	m.t.Helper()
	want := fmt.Sprintf("stockade: sandbox %s: sandbox is %s: %s; %s\n", name, phase, worksFrom(verb), hint)
	if r.code != 4 || r.errOut != want {
		m.t.Fatalf("%s %s in %s: exit %d %q %q\nwant exit 4 %q", verb, name, phase, r.code, r.out, r.errOut, want)
	}
}

func (m *matrix) refuse(name, phase, hint string, verb ...string) {
	m.t.Helper()
	m.refusal(m.parallel(append([]string{verb[0], name}, verb[1:]...))[0], name, phase, strings.Join(verb, " "), hint)
}

// works runs a verb and checks its reply.
func (m *matrix) works(name string, verb ...string) {
	m.t.Helper()
	r := m.parallel(append([]string{verb[0], name, "--no-wait"}, verb[1:]...))[0]
	if want := name + ": " + replyPhase(strings.Join(verb, " ")) + "\n"; r.code != 0 || r.out != want {
		m.t.Fatalf("%s %s: exit %d %q %q, want %q", strings.Join(verb, " "), name, r.code, r.out, r.errOut, want)
	}
}

// cell is one (cause, verb) pair: a sandbox held in the cause's phase and
// the verb applied to it.
type cell struct {
	box  string
	verb string // "stop", "stop --force", "start", "recover", "delete", "delete --keep-workspace"
	hint string // set: the verb is refused in the held phase, with this hint
}

// walk applies every cell's verb at once to its sandbox, all held in phase
// held with reason, then checks the replies, the phase each settles in, the
// workspace, and a path back to Ready on the same workspace.
func (m *matrix) walk(held, reason string, cells []cell) {
	t := m.t
	t.Helper()
	before := m.list()
	var calls [][]string
	for _, c := range cells {
		if s := before[c.box]; s.Phase != held || s.Reason != reason {
			t.Fatalf("%s before %s: %v, want %s/%s", c.box, c.verb, s, held, reason)
		}
		m.intact(c.box, "before "+c.verb)
		v := strings.Fields(c.verb)
		calls = append(calls, append([]string{v[0], c.box, "--no-wait"}, v[1:]...))
	}
	res := m.parallel(calls...)

	// The replies, and where each settles.
	settle := map[string]string{}
	for i, c := range cells {
		switch {
		case c.hint != "":
			m.refusal(res[i], c.box, held, c.verb, c.hint)
			settle[c.box] = held
			if held == "Provisioning" {
				settle[c.box] = "Ready" // it goes on by itself
			}
		case res[i].code != 0 || res[i].out != c.box+": "+replyPhase(c.verb)+"\n":
			t.Fatalf("%s %s in %s: exit %d %q %q, want %q", c.verb, c.box, held, res[i].code, res[i].out, res[i].errOut, c.box+": "+replyPhase(c.verb))
		default:
			settle[c.box] = settlePhase(c.verb)
		}
	}
	after := m.await("settled after the verbs", 30*time.Second, cellBoxes(cells), func(n string, s mstatus, ok bool) bool {
		if settle[n] == "" {
			return !ok
		}
		return ok && s.Phase == settle[n]
	})

	// The verb landed in the held phase; the workspace is there; a way out.
	var out []string
	for _, c := range cells {
		s := after[c.box]
		if c.hint == "" && settle[c.box] != "" && s.leftVia(held) != replyPhase(c.verb) {
			t.Fatalf("%s %s: not %s -> %s: %v", c.verb, c.box, held, replyPhase(c.verb), s)
		}
		if c.verb == "delete" {
			if _, err := os.Stat(m.workspace(c.box)); !os.IsNotExist(err) {
				t.Fatalf("delete %s from %s left the workspace: %v", c.box, held, err)
			}
			continue
		}
		out = append(out, c.box)
		if settle[c.box] == "Ready" {
			continue // the verb (or, refused in Provisioning, the start going on) was the way out
		}
		m.intact(c.box, c.verb+" from "+held)
		switch {
		case c.hint != "":
			if s.Reason != reason {
				t.Fatalf("refused %s changed %s: %v", c.verb, c.box, s)
			}
			m.works(c.box, "recover")
		case settle[c.box] == "Stopped":
			m.refuse(c.box, "Stopped", hintStopped, strings.Fields(c.verb)...)
			m.refuse(c.box, "Stopped", hintStopped, "recover")
			m.works(c.box, "start")
		case settle[c.box] == "":
			m.create(false, m.boxes[c.box])
		}
	}
	ready := m.awaitPhase("Ready", "", 30*time.Second, out...)
	for _, n := range out {
		m.ranAgain(n, "back to Ready after "+held+"/"+reason)
		if s := ready[n]; s.Workspace != m.workspace(n) || s.SupervisorPid <= 0 || syscall.Kill(s.SupervisorPid, 0) != nil {
			t.Fatalf("%s is Ready without its supervisor or workspace: %v %s", n, s, s.Workspace)
		}
	}
	if len(out) > 0 {
		m.refuse(out[0], "Ready", hintReadyStart, "start")
		m.refuse(out[0], "Ready", hintReadyRecover, "recover")
	}
	m.onlyLiveSupervisors()
}

// onlyLiveSupervisors: one supervisor process per sandbox that runs, none
// left over from an earlier instance.
func (m *matrix) onlyLiveSupervisors() {
	m.t.Helper()
	var want []int
	for _, s := range m.list() {
		if s.Phase == "Ready" {
			want = append(want, s.SupervisorPid)
		}
	}
	slices.Sort(want)
	var got []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = testworld.SupervisorsOf(m.state)
		slices.Sort(got)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("supervisor processes %v, want those of the Ready sandboxes %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the sandboxes' supervisors.
func (m *matrix) kill(all map[string]mstatus, names ...string) {
	m.t.Helper()
	for _, n := range names {
		if pid := all[n].SupervisorPid; pid <= 0 {
			m.t.Fatalf("%s has no supervisor pid: %v", n, all[n]) // never kill(0) or kill(-1)
		}
		if err := syscall.Kill(all[n].SupervisorPid, syscall.SIGKILL); err != nil {
			m.t.Fatalf("kill the supervisor of %s (%d): %v", n, all[n].SupervisorPid, err)
		}
	}
}

// fault arms a rule in each sandbox's supervisor.
func (m *matrix) fault(rule string, names ...string) {
	m.t.Helper()
	var calls [][]string
	for _, n := range names {
		calls = append(calls, []string{"fault", n, rule})
	}
	for i, r := range m.parallel(calls...) {
		if r.code != 0 {
			m.t.Fatalf("fault %s %s: exit %d %s", names[i], rule, r.code, r.errOut)
		}
	}
}

func boxes(script string, extra []string, names ...string) []box {
	var bs []box
	for _, n := range names {
		bs = append(bs, box{name: n, script: script, extra: extra})
	}
	return bs
}

// heldRetry checks a Recovering sandbox waits for a retry (or the grace)
// at least min from now, with the attempt count still 0.
func (m *matrix) heldRetry(all map[string]mstatus, atLeast time.Duration, names ...string) {
	m.t.Helper()
	for _, n := range names {
		s := all[n]
		at, err := time.Parse(time.RFC3339Nano, s.NextRetry)
		if err != nil || time.Until(at) < atLeast || s.RecoveryAttempts != 0 {
			m.t.Fatalf("%s: nextRetry %q (%v), want >= %s ahead, and 0 attempts: %v", n, s.NextRetry, err, atLeast, s)
		}
	}
}

// stdCells is the verb set for a held Recovering phase.
func stdCells(prefix string) []cell {
	return []cell{
		{box: prefix + "-stop", verb: "stop"},
		{box: prefix + "-force", verb: "stop --force"},
		{box: prefix + "-start", verb: "start", hint: hintRecovering},
		{box: prefix + "-keep", verb: "delete --keep-workspace"},
	}
}

func cellBoxes(cs []cell) []string {
	var ns []string
	for _, c := range cs {
		ns = append(ns, c.box)
	}
	return ns
}

// Provisioning: the gateway's supervisor start is delayed 4 s (the
// sandbox actor waits in it), so verbs sent right after create land in
// Provisioning.
func matrixProvisioning(m *matrix) {
	cells := []cell{
		{box: "p-stop", verb: "stop"},
		{box: "p-force", verb: "stop --force"},
		{box: "p-keep", verb: "delete --keep-workspace"},
		{box: "p-start", verb: "start", hint: hintProvisioning},
		{box: "p-recover", verb: "recover", hint: hintProvisioning},
	}
	m.create(true, boxes(sleeper, nil, cellBoxes(cells)...)...)
	m.walk("Provisioning", "", cells)
}

// StartFailed: the gateway fails the first four supervisor starts
// (supervisor.start=error:4): Provisioning -> Error/StartFailed ->
// Recovering, the retry >= 20 s away.
func matrixStartFailed(m *matrix) {
	cells := stdCells("sf")
	names := cellBoxes(cells)
	m.create(true, boxes(sleeper, nil, names...)...)
	all := m.awaitPhase("Recovering", "StartFailed", 30*time.Second, names...)
	for _, n := range names {
		if s := all[n]; !s.has("Provisioning", "Error", "StartFailed") || !strings.Contains(s.Message, "supervisor.start: injected fault") ||
			!strings.Contains(s.Message, "recovery attempt 1 of 10 in") {
			m.t.Fatalf("%s: %v", n, s)
		}
	}
	m.heldRetry(all, 10*time.Second, names...)
	m.walk("Recovering", "StartFailed", cells)
}

// SupervisorLost: SIGKILL of each supervisor. Also: `get` shows the
// reason, message, attempts, next retry and the transitions with their
// time, and each transition is a lifecycle audit event (class 6002) in
// `sandbox logs`.
func matrixSupervisorLost(m *matrix) {
	cells := append(stdCells("sl"), cell{box: "sl-del", verb: "delete"})
	names := cellBoxes(cells)
	m.create(true, boxes(sleeper, nil, names...)...)
	m.kill(m.awaitPhase("Ready", "", 30*time.Second, names...), names...)
	all := m.awaitPhase("Recovering", "SupervisorLost", 30*time.Second, names...)
	m.heldRetry(all, 10*time.Second, names...)

	out, _, code := m.cli("get", "sl-start")
	for _, re := range []string{`(?m)^phase\s+Recovering$`, `(?m)^reason\s+SupervisorLost$`, `(?m)^recovery attempts\s+0$`,
		`(?m)^message\s+.*recovery attempt 1 of 10 in \d+(\.\d+)?s$`, `(?m)^next retry\s+\d{4}-\d\d-\d\dT\S+Z$`,
		`(?m)^\s+\d{4}-\d\d-\d\dT\S+Z\s+Ready -> Error\s+SupervisorLost\s+gateway:local$`, `(?m)^\s+\d{4}-\d\d-\d\dT\S+Z\s+Error -> Recovering\s+SupervisorLost\s+gateway:local$`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			m.t.Fatalf("get sl-start (exit %d) lacks %s:\n%s", code, re, out)
		}
	}
	m.walk("Recovering", "SupervisorLost", cells)
	m.audited("sl-start")
	logs, _, code := m.cli("logs", "sl-start", "--audit")
	for _, want := range []string{"LIFECYCLE:ERROR [MED] Ready -> Error (SupervisorLost): ", "LIFECYCLE:RECOVERING [INFO] Error -> Recovering (SupervisorLost): ",
		"LIFECYCLE:RECOVERING [INFO] Recovering -> Recovering (SupervisorLost): recover requested", "LIFECYCLE:READY [INFO] Recovering -> Ready: running again"} {
		if code != 0 || !strings.Contains(logs, want) {
			m.t.Fatalf("logs --audit (exit %d) lacks %q:\n%s", code, want, logs)
		}
	}

	// A graceful gateway restart: the supervisors are re-adopted through
	// SessionLost, recorded once, at the restart, each with its event.
	running := []string{"sl-stop", "sl-force", "sl-start"}
	before := m.list()
	_ = m.gw.Process.Signal(syscall.SIGTERM)
	if err := <-m.gwDone; err != nil {
		m.t.Fatalf("gateway stop: %v\n%s", err, m.gwLog)
	}
	m.startGateway()
	m.await("re-adopted after a gateway restart", 30*time.Second, running, func(n string, s mstatus, ok bool) bool {
		if !ok || s.Phase != "Ready" || len(s.Transitions) < 3 {
			return false
		}
		var last []string
		for _, tr := range s.Transitions[len(s.Transitions)-3:] {
			last = append(last, tr.From+"->"+tr.To+"("+tr.Reason+")")
		}
		return s.SupervisorPid == before[n].SupervisorPid && len(s.Transitions) == len(before[n].Transitions)+3 &&
			strings.Join(last, " ") == "Ready->Error(SessionLost) Error->Recovering(SessionLost) Recovering->Ready()"
	})
	for _, n := range running {
		m.audited(n)
	}
}

// audited checks that each transition `get` shows is a lifecycle audit
// event (class 6002) in the sandbox's lifecycle file, in order, and no
// event is missing.
func (m *matrix) audited(name string) {
	m.t.Helper()
	s := m.list()[name]
	events := m.lifecycleEvents(name)
	if len(events) != len(s.Transitions) {
		m.t.Fatalf("%s: %d lifecycle events for %d transitions:\n%s\n%v", name, len(events), len(s.Transitions), strings.Join(events, "\n"), s)
	}
	for i, tr := range s.Transitions {
		if !strings.HasPrefix(events[i], tr.From+" -> "+tr.To) {
			m.t.Fatalf("%s: lifecycle event %d %q is not the transition %s -> %s", name, i, events[i], tr.From, tr.To)
		}
	}
}

// lifecycleEvents reads the sandbox's lifecycle audit file: every line is
// a class 6002 event; it returns their messages.
func (m *matrix) lifecycleEvents(name string) []string {
	m.t.Helper()
	b, err := os.ReadFile(sandboxLog(m.state, name, contract.LifecycleLog))
	if err != nil {
		m.t.Fatal(err)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e struct {
			Class   int    `json:"class_uid"`
			Sandbox string `json:"sandbox"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Class != 6002 || e.Sandbox != name {
			m.t.Fatalf("lifecycle event %q: %v", line, err)
		}
		msgs = append(msgs, e.Message)
	}
	return msgs
}

// SessionLost: the supervisor stays silent (session.silence, one skipped
// heartbeat a second) while it and its workload live. Silent for 60 s: the
// sandbox waits out a 20 s grace in Recovering/SessionLost, where the verbs
// land. Silent for 4 s: the supervisor reconnects within the grace and the
// same workload runs on (no respawn).
func matrixSessionLost(m *matrix) {
	cells := stdCells("ss")
	names := cellBoxes(cells)
	m.create(true, boxes(sleeper, nil, append(names, "ss-back")...)...)
	ready := m.awaitPhase("Ready", "", 30*time.Second, append(names, "ss-back")...)
	m.fault("session.silence=error:60", names...)
	m.fault("session.silence=error:4", "ss-back")
	all := m.awaitPhase("Recovering", "SessionLost", 30*time.Second, names...)
	m.heldRetry(all, 10*time.Second, names...)
	for _, n := range names {
		if s := all[n]; !strings.Contains(s.Message, "waiting 20s for the supervisor to reconnect") || s.SupervisorPid != ready[n].SupervisorPid {
			m.t.Fatalf("%s: %v", n, s)
		}
	}
	back := m.await("reconnected", 30*time.Second, []string{"ss-back"}, func(_ string, s mstatus, ok bool) bool {
		return ok && s.Phase == "Ready" && s.has("Recovering", "Ready", "")
	})["ss-back"]
	if !back.has("Ready", "Error", "SessionLost") || !back.has("Error", "Recovering", "SessionLost") ||
		back.SupervisorPid != ready["ss-back"].SupervisorPid || back.WorkloadPid != ready["ss-back"].WorkloadPid {
		m.t.Fatalf("ss-back did not reconnect with the same supervisor and workload (%d, %d): %v", ready["ss-back"].SupervisorPid, ready["ss-back"].WorkloadPid, back)
	}
	m.intact("ss-back", "reconnect")
	if m.runs["ss-back"] != 1 {
		m.t.Fatalf("ss-back's workload ran %d times, want once (it never stopped)", m.runs["ss-back"])
	}
	m.walk("Recovering", "SessionLost", cells)
	for _, n := range names {
		if pid := ready[n].SupervisorPid; pid <= 0 || syscall.Kill(pid, 0) == nil {
			m.t.Fatalf("the silent supervisor %d of %s outlived the verb", ready[n].SupervisorPid, n)
		}
	}
}

// BoundaryFailed: the proxy listener fails on every start and accepted
// connection (proxy.listen=error) past its restart budget.
func matrixBoundaryFailed(m *matrix) {
	cells := stdCells("bf")
	names := cellBoxes(cells)
	m.create(true, boxes(m.curler(), nil, names...)...)
	m.awaitPhase("Ready", "", 30*time.Second, names...)
	m.fault("proxy.listen=error", names...)
	all := m.awaitPhase("Recovering", "BoundaryFailed", 30*time.Second, names...)
	m.heldRetry(all, 10*time.Second, names...)
	for _, n := range names {
		if s := all[n]; !s.has("Ready", "Error", "BoundaryFailed") || !strings.Contains(s.Message, "proxy actor failed 10 times in 10 s") {
			m.t.Fatalf("%s: %v", n, s)
		}
	}
	m.walk("Recovering", "BoundaryFailed", cells)
}

// WorkloadFailed: the workload exits 3 on its first run. restart: never
// stays in Error/WorkloadFailed (no automatic try; exec refused), where
// every verb works; on-failure is held in Recovering/WorkloadFailed.
func matrixWorkloadFailed(m *matrix) {
	never := []cell{
		{box: "wn-stop", verb: "stop"},
		{box: "wn-force", verb: "stop --force"},
		{box: "wn-start", verb: "start"},
		{box: "wn-recover", verb: "recover"},
		{box: "wn-keep", verb: "delete --keep-workspace"},
	}
	onFailure := []cell{
		{box: "wo-stop", verb: "stop"},
		{box: "wo-start", verb: "start", hint: hintRecovering},
	}
	m.create(true, append(boxes(failOnce, []string{"--restart", "never"}, cellBoxes(never)...),
		boxes(failOnce, []string{"--restart", "on-failure"}, cellBoxes(onFailure)...)...)...)
	all := m.awaitPhase("Error", "WorkloadFailed", 30*time.Second, cellBoxes(never)...)
	for _, n := range cellBoxes(never) {
		if s := all[n]; s.Message != "workload exited with code 3; restart: never (use start or recover)" || s.NextRetry != "" || s.RecoveryAttempts != 0 {
			m.t.Fatalf("%s: %v", n, s)
		}
	}
	r := m.parallel([]string{"exec", "wn-start", "--", "true"})[0]
	m.refusal(r, "wn-start", "Error", "exec", hintError)
	held := m.awaitPhase("Recovering", "WorkloadFailed", 30*time.Second, cellBoxes(onFailure)...)
	m.heldRetry(held, 10*time.Second, cellBoxes(onFailure)...)
	m.walk("Error", "WorkloadFailed", never)
	m.walk("Recovering", "WorkloadFailed", onFailure)
}

// RecoveryExhausted: every supervisor start fails (gateway fault armed at
// run time) and the supervisors are SIGKILLed: 10 failed attempts ->
// Error/RecoveryExhausted, no retry scheduled. Disarmed, the sandbox
// still makes no automatic try; every verb works from there.
func matrixRecoveryExhausted(m *matrix) {
	cells := []cell{
		{box: "re-stop", verb: "stop"},
		{box: "re-force", verb: "stop --force"},
		{box: "re-start", verb: "start"},
		{box: "re-recover", verb: "recover"},
		{box: "re-keep", verb: "delete --keep-workspace"},
		{box: "re-del", verb: "delete"},
	}
	names := cellBoxes(cells)
	m.create(true, boxes(sleeper, nil, names...)...)
	ready := m.awaitPhase("Ready", "", 30*time.Second, names...)
	if out, errOut, code := m.cli("fault", "--gateway", "supervisor.start=error"); code != 0 {
		m.t.Fatalf("arm supervisor.start: exit %d %s%s", code, out, errOut)
	}
	m.kill(ready, names...)
	all := m.awaitPhase("Error", "RecoveryExhausted", 30*time.Second, names...)
	for _, n := range names {
		s := all[n]
		if s.RecoveryAttempts != 10 || s.NextRetry != "" || !s.has("Ready", "Error", "SupervisorLost") ||
			!s.has("Recovering", "Recovering", "StartFailed") || !s.has("Recovering", "Error", "RecoveryExhausted") ||
			!strings.HasPrefix(s.Message, "10 recovery attempts failed in a row, the last with StartFailed (") ||
			!strings.HasSuffix(s.Message, "no more automatic tries: use recover or start") {
			m.t.Fatalf("%s: %v", n, s)
		}
	}
	if out, errOut, code := m.cli("fault", "--gateway", "supervisor.start=off"); code != 0 {
		m.t.Fatalf("disarm supervisor.start: exit %d %s%s", code, out, errOut)
	}
	// With the fault gone any automatic try would now succeed: each stays
	// in Error for 1 s after the disarm (> 3 x the longest backoff here).
	disarmed := time.Now()
	m.await("in Error for 1 s after the disarm", 30*time.Second, names, func(n string, s mstatus, ok bool) bool {
		if !ok || s.Phase != "Error" || len(s.Transitions) != len(all[n].Transitions) {
			m.t.Fatalf("%s left RecoveryExhausted by itself: %v", n, s)
		}
		return time.Since(disarmed) > time.Second
	})
	m.walk("Error", "RecoveryExhausted", cells)
	if s := m.list()["re-recover"]; s.RecoveryAttempts != 1 || !s.has("Error", "Recovering", "StartFailed") {
		m.t.Fatalf("recover did not reset the attempt count (want 1 attempt, the one that worked): %v", s)
	}
}

// Automatic: every recoverable reason gets back to Ready by itself on a
// fast backoff and a 2 s grace, on the same workspace.
func matrixAutomatic(m *matrix) {
	// The gateway fails its first supervisor start (supervisor.start=error:1).
	m.create(true, boxes(sleeper, nil, "a-startfailed")...)
	m.await("Ready after StartFailed", 30*time.Second, []string{"a-startfailed"}, func(_ string, s mstatus, ok bool) bool {
		return ok && s.Phase == "Ready" && s.has("Provisioning", "Error", "StartFailed") && s.has("Error", "Recovering", "StartFailed")
	})
	m.create(true, append(append(boxes(sleeper, nil, "a-suplost", "a-session"), boxes(m.curler(), nil, "a-boundary")...),
		box{name: "a-always", script: failOnce, extra: []string{"--restart", "always"}},
		box{name: "a-onfailure", script: failOnce, extra: []string{"--restart", "on-failure"}})...)
	ready := m.awaitPhase("Ready", "", 30*time.Second, "a-suplost", "a-session", "a-boundary")
	m.kill(ready, "a-suplost")
	m.fault("session.silence=error:60", "a-session")
	m.fault("proxy.listen=error", "a-boundary")
	want := map[string][][3]string{
		"a-startfailed": {{"Provisioning", "Error", "StartFailed"}},
		"a-suplost":     {{"Ready", "Error", "SupervisorLost"}, {"Error", "Recovering", "SupervisorLost"}},
		// The grace runs out: Recovering -> Recovering, respawned.
		"a-session":   {{"Ready", "Error", "SessionLost"}, {"Error", "Recovering", "SessionLost"}, {"Recovering", "Recovering", "SessionLost"}},
		"a-boundary":  {{"Ready", "Error", "BoundaryFailed"}, {"Error", "Recovering", "BoundaryFailed"}},
		"a-always":    {{"Ready", "Error", "WorkloadFailed"}, {"Error", "Recovering", "WorkloadFailed"}},
		"a-onfailure": {{"Ready", "Error", "WorkloadFailed"}, {"Error", "Recovering", "WorkloadFailed"}},
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	slices.Sort(names)
	all := m.await("Ready again", 30*time.Second, names, func(n string, s mstatus, ok bool) bool {
		if !ok || s.Phase != "Ready" || !s.has("Recovering", "Ready", "") {
			return false
		}
		for _, tr := range want[n] {
			if !s.has(tr[0], tr[1], tr[2]) {
				return false
			}
		}
		return true
	})
	for _, n := range []string{"a-suplost", "a-session", "a-boundary"} {
		if old := ready[n].SupervisorPid; all[n].SupervisorPid == old {
			m.t.Fatalf("%s: Ready on the old supervisor %d: %v", n, old, all[n])
		}
	}
	for _, n := range names {
		if n != "a-startfailed" { // its first start failed before any run
			m.runs[n] = 1
		}
		m.ranAgain(n, "automatic recovery")
	}
	m.onlyLiveSupervisors()
}
