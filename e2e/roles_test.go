package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// clients issues client bundles with an admin's configuration and runs
// verbs with them, as their holders would elsewhere: only the bundle (its
// gateway address inside) and an empty state dir.
type clients struct {
	t     *testing.T
	w     *world
	dir   string
	empty string
}

func newClients(t *testing.T, w *world) *clients {
	return &clients{t: t, w: w, dir: t.TempDir(), empty: t.TempDir()}
}

// bundle is the configuration file of client name.
func (c *clients) bundle(name string) string { return filepath.Join(c.dir, name+".config") }

// issue makes a bundle for name, asked by issuer ("" for the gateway's
// local admin); it returns the exit code, stdout and stderr.
func (c *clients) issue(issuer, name string, args ...string) (int, string, string) {
	c.t.Helper()
	full := append([]string{"client", "issue", name, "--out", c.bundle(name)}, args...)
	out, errOut, code := c.as(issuer, full...)
	return code, out, errOut
}

// as runs the stockade CLI as client name ("" for the local admin): args
// start with the command's two words ("sandbox exec"); the configuration
// flags go after them (before any "--").
func (c *clients) as(name string, args ...string) (string, string, int) {
	c.t.Helper()
	flags := []string{"--state-dir", c.w.state, "--gateway", c.w.addr}
	var env []string
	if name != "" {
		flags, env = []string{"--config", c.bundle(name), "--state-dir", c.empty}, []string{"STOCKADE_CONFIG=", "STOCKADE_GATEWAY="}
	}
	full := append(append(append([]string{}, args[:2]...), flags...), args[2:]...)
	return run(c.t, env, full...)
}

// TestClientRoles: a viewer reads but cannot delete, stop, exec, create or
// issue (each exit 4 naming its role, the sandbox unchanged: same phase,
// same supervisor pid); an operator cannot touch another's sandbox but
// drives its own, and cannot issue (an admin least of all); the lifecycle
// log and get name who asked; client list shows every certificate with its
// role and issuer; revoking an admin client revokes the clients it issued,
// refused at the handshake, while the local admin still works.
func TestClientRoles(t *testing.T) {
	w := newWorld(t, 0)
	c := newClients(t, w)
	for _, cl := range []struct{ name, role string }{{"vic", "viewer"}, {"bob", "operator"}, {"carol", "operator"}, {"boss", "admin"}} {
		if code, out, errOut := c.issue("", cl.name, "--role", cl.role); code != 0 || !strings.Contains(out, "client "+cl.name+": "+cl.role) {
			t.Fatalf("issue %s: exit %d\n%s%s", cl.name, code, out, errOut)
		}
	}
	if code, _, errOut := c.issue("", "nobody-role"); code != 2 || !strings.Contains(errOut, "--role is required") {
		t.Fatalf("issue without --role: exit %d %s", code, errOut)
	}
	for _, cl := range []struct{ name, role string }{{"dave", "operator"}, {"erin", "viewer"}} {
		if code, out, errOut := c.issue("boss", cl.name, "--role", cl.role); code != 0 || !strings.Contains(out, "issued by client:boss") {
			t.Fatalf("boss issues %s: exit %d\n%s%s", cl.name, code, out, errOut)
		}
	}

	ops := w.create("ops", "exec sleep infinity")
	unchanged := func(who, what string) {
		t.Helper()
		s, code := w.get("ops")
		if code != 0 || s.Phase != "Ready" || s.SupervisorPid != ops.SupervisorPid || s.SupervisorPid == 0 {
			t.Fatalf("after %s's %s: ops is %s with supervisor %d (exit %d), want Ready with %d", who, what, s.Phase, s.SupervisorPid, code, ops.SupervisorPid)
		}
	}
	refused := func(who, role string, args ...string) {
		t.Helper()
		out, errOut, code := c.as(who, args...)
		if code != 4 || !strings.Contains(errOut, "client:"+who+" is a") || !strings.Contains(errOut, role) {
			t.Fatalf("%s: %v: exit %d\n%s%s\nwant exit 4 naming client:%s and %s", who, args, code, out, errOut, who, role)
		}
		unchanged(who, strings.Join(args, " "))
	}

	// The viewer reads...
	for _, args := range [][]string{{"sandbox", "get", "ops"}, {"sandbox", "list"}, {"sandbox", "logs", "ops"}, {"policy", "get", "ops"}} {
		if out, errOut, code := c.as("vic", args...); code != 0 {
			t.Fatalf("viewer %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	// ... and nothing else.
	refused("vic", "viewer", "sandbox", "delete", "ops")
	refused("vic", "viewer", "sandbox", "stop", "ops")
	refused("vic", "viewer", "sandbox", "stop", "ops", "--force")
	refused("vic", "viewer", "sandbox", "exec", "ops", "--", "/bin/true")
	refused("vic", "viewer", "policy", "set", "ops", w.policy)
	refused("vic", "viewer", "sandbox", "create", "vics", "--policy", w.policy, "--", "/bin/true")
	refused("vic", "viewer", "client", "issue", "mallory", "--role", "viewer", "--out", c.bundle("mallory"))
	refused("vic", "viewer", "client", "list")
	if _, code := w.get("vics"); code != 3 {
		t.Fatalf("the viewer's create made a sandbox (get exit %d)", code)
	}

	// An operator: another's sandbox, no; clients, no.
	refused("bob", "operator", "sandbox", "stop", "ops")
	refused("bob", "operator", "sandbox", "delete", "ops")
	refused("bob", "operator", "sandbox", "exec", "ops", "--", "/bin/true")
	refused("bob", "operator", "client", "issue", "mallory", "--role", "admin", "--out", c.bundle("mallory"))
	refused("bob", "operator", "client", "revoke", "vic")
	// Its own: create, exec, stop, start; another operator cannot.
	if out, errOut, code := c.as("bob", "sandbox", "create", "bobs", "--policy", w.policy, "--", "/bin/sh", "-c", "exec sleep infinity"); code != 0 {
		t.Fatalf("operator create: exit %d\n%s%s", code, out, errOut)
	}
	bobs := w.waitPhase("bobs", "Ready", 30*time.Second, nil)

	// F1: an operator may not lift its sandbox's limits (the workload's
	// log, memory, pids: the host's protections), nor allow ptrace; each
	// refusal names the limits, its role and what works, and nothing is
	// created or changed.
	out, errOut, code := c.as("bob", "sandbox", "create", "opbox", "--policy", w.policy, "--memory", "none", "--pids", "-1", "--cpus", "-1",
		"--log-size", "none", "--log-rate", "-1", "--", "/bin/sh", "-c", "exec sleep infinity")
	if code != 4 || !strings.Contains(errOut, "client:bob is an operator client") || !strings.Contains(errOut, "--memory none (no limit)") ||
		!strings.Contains(errOut, "--log-size none (no limit)") || !strings.Contains(errOut, "ask for at most the gateway's defaults") {
		t.Fatalf("operator's create without limits: exit %d\n%s%s\nwant exit 4 naming the limits and what works", code, out, errOut)
	}
	if _, code := w.get("opbox"); code != 3 {
		t.Fatalf("the operator's refused create made a sandbox (get exit %d)", code)
	}
	ptrace := filepath.Join(c.dir, "ptrace.yaml")
	pol, err := os.ReadFile(w.policy)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ptrace, append(pol, "stockade:\n  allow_ptrace: true\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	policyBefore, _, _ := c.as("", "policy", "get", "bobs")
	if out, errOut, code := c.as("bob", "policy", "set", "bobs", ptrace); code != 4 || !strings.Contains(errOut, "stockade.allow_ptrace: true") || !strings.Contains(errOut, "operator") {
		t.Fatalf("operator's policy set with allow_ptrace: exit %d\n%s%s", code, out, errOut)
	}
	if after, _, _ := c.as("", "policy", "get", "bobs"); after != policyBefore || strings.Contains(after, "allow_ptrace") {
		t.Fatalf("the refused policy set changed bobs' policy:\n%s\nwas\n%s", after, policyBefore)
	}
	if s, _ := w.get("bobs"); s.SupervisorPid != bobs.SupervisorPid || len(s.Transitions) != len(bobs.Transitions) {
		t.Fatalf("bobs after the refused policy set: supervisor %d, %d transitions, was %d, %d", s.SupervisorPid, len(s.Transitions), bobs.SupervisorPid, len(bobs.Transitions))
	}

	// F6: a name the admin granted to ci is not bob's to create first.
	if code, out, errOut := c.issue("", "ci", "--role", "operator", "--sandbox", "build"); code != 0 {
		t.Fatalf("issue ci: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := c.as("bob", "sandbox", "create", "build", "--policy", w.policy, "--", "/bin/true"); code != 4 || !strings.Contains(errOut, "granted to client ci") {
		t.Fatalf("bob squats ci's build: exit %d\n%s%s", code, out, errOut)
	}
	if _, code := w.get("build"); code != 3 {
		t.Fatalf("bob's refused create of build made a sandbox (get exit %d)", code)
	}
	if out, errOut, code := c.as("bob", "sandbox", "exec", "bobs", "--", "/bin/echo", "hello from bobs"); code != 0 || !strings.Contains(out, "hello from bobs") {
		t.Fatalf("operator exec in its own: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := c.as("carol", "sandbox", "stop", "bobs"); code != 4 || !strings.Contains(errOut, "created by client:bob") {
		t.Fatalf("carol stops bob's: exit %d\n%s%s", code, out, errOut)
	}
	if s, _ := w.get("bobs"); s.Phase != "Ready" || s.SupervisorPid != bobs.SupervisorPid {
		t.Fatalf("carol's stop changed bobs: %+v", s)
	}
	if out, errOut, code := c.as("bob", "sandbox", "stop", "bobs"); code != 0 {
		t.Fatalf("operator stops its own: exit %d\n%s%s", code, out, errOut)
	}
	w.waitPhase("bobs", "Stopped", 30*time.Second, nil)
	if out, errOut, code := c.as("", "sandbox", "start", "bobs"); code != 0 {
		t.Fatalf("admin starts bob's: exit %d\n%s%s", code, out, errOut)
	}
	w.waitPhase("bobs", "Ready", 30*time.Second, nil)

	// Who asked, in get (table and JSON) and in the lifecycle log.
	table, _, _ := w.cli("get", "bobs")
	for _, re := range []string{`(?m)^created by\s+client:bob$`, `(?m)^\s+\S+\s+Ready -> Stopping\s+-\s+client:bob$`,
		`(?m)^\s+\S+\s+Stopped -> Provisioning\s+-\s+client:admin$`, `(?m)^\s+\S+\s+Provisioning -> Ready\s+-\s+supervisor:bobs$`} {
		if !regexp.MustCompile(re).MatchString(table) {
			t.Fatalf("get bobs lacks %s:\n%s", re, table)
		}
	}
	js, _, _ := w.cli("get", "bobs", "-o", "json")
	var got struct {
		CreatedBy   string `json:"createdBy"`
		Transitions []struct{ From, To, By string }
	}
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	var bys []string
	for _, tr := range got.Transitions {
		bys = append(bys, tr.From+">"+tr.To+" "+tr.By)
	}
	if got.CreatedBy != "client:bob" || !strings.Contains(strings.Join(bys, "|"), "Ready>Stopping client:bob|Stopping>Stopped gateway:local|Stopped>Provisioning client:admin") {
		t.Fatalf("get -o json: createdBy %q, transitions %v", got.CreatedBy, bys)
	}
	logs, _, _ := c.as("vic", "sandbox", "logs", "bobs", "--audit")
	for _, want := range []string{"None -> Provisioning: created by client:bob", "Ready -> Stopping: stop requested by client:bob",
		"Stopped -> Provisioning: start requested by client:admin"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("logs --audit lacks %q:\n%s", want, logs)
		}
	}

	// client list: the admin's view of every certificate.
	list, errOut, code := c.as("", "client", "list", "-o", "json")
	var certs []struct{ Name, Role, IssuedBy, Serial, NotAfter, Revoked string }
	if code != 0 || json.Unmarshal([]byte(list), &certs) != nil {
		t.Fatalf("client list: exit %d\n%s%s", code, list, errOut)
	}
	seen := map[string]string{}
	for _, ct := range certs {
		if ct.Serial == "" || ct.NotAfter == "" || ct.Revoked != "" {
			t.Fatalf("client list row %+v", ct)
		}
		seen[ct.Name] = ct.Role + " " + ct.IssuedBy
	}
	for name, want := range map[string]string{"admin": "admin gateway:local", "vic": "viewer client:admin", "bob": "operator client:admin",
		"boss": "admin client:admin", "dave": "operator client:boss", "erin": "viewer client:boss"} {
		if seen[name] != want {
			t.Fatalf("client list: %s is %q, want %q\n%s", name, seen[name], want, list)
		}
	}

	// F9: boss renews the local admin's name (an admin keeps its role:
	// allowed) into a bundle of its own.
	if code, out, errOut := c.issue("boss", "admin", "--role", "admin"); code != 0 {
		t.Fatalf("boss renews admin: exit %d\n%s%s", code, out, errOut)
	}

	// Revoking boss revokes dave, erin and the "admin" certificate boss
	// issued (by certificate): refused at the handshake; the local
	// admin's own certificate (the gateway's) and the others still work.
	out, errOut, code = c.as("", "client", "revoke", "boss")
	if code != 0 || !strings.Contains(out, "dave (1)") || !strings.Contains(out, "erin (1)") || !strings.Contains(out, "admin (1)") ||
		strings.Contains(out, "issues a new local admin certificate") {
		t.Fatalf("revoke boss: exit %d\n%s%s", code, out, errOut)
	}
	for _, who := range []string{"boss", "dave", "erin", "admin"} {
		if _, errOut, code := c.as(who, "sandbox", "list"); code != 5 || !strings.Contains(errOut, "refused this client's certificate") {
			t.Fatalf("%s after revoking boss: exit %d %s, want 5 and the handshake's refusal", who, code, errOut)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(w.gwLog.String(), "revoked") }, "the gateway to log the revoked handshakes")
	for _, who := range []string{"", "vic", "bob"} {
		if _, errOut, code := c.as(who, "sandbox", "list"); code != 0 {
			t.Fatalf("%q after revoking boss: exit %d %s", who, code, errOut)
		}
	}

	// F6: a revoked name is not issued again without --reuse-name (the new
	// holder would drive what it created).
	_ = os.Remove(c.bundle("dave"))
	if code, out, errOut := c.issue("", "dave", "--role", "operator"); code != 4 || !strings.Contains(errOut, "client dave was revoked") || !strings.Contains(errOut, "--reuse-name") {
		t.Fatalf("issue the revoked dave again: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(c.bundle("dave")); err == nil {
		t.Fatal("the refused issue of dave wrote a bundle")
	}
	if code, out, errOut := c.issue("", "dave", "--role", "operator", "--reuse-name"); code != 0 {
		t.Fatalf("issue the revoked dave again with --reuse-name: exit %d\n%s%s", code, out, errOut)
	}
	table, _, _ = c.as("", "client", "list")
	for _, re := range []string{`(?m)^dave\s+operator\s+-\s+client:boss\s+[0-9a-f]+\s+\S+Z\s+\S+Z\s+\d{4}-\S+Z$`, `(?m)^vic\s+viewer\s+-\s+client:admin\s+[0-9a-f]+\s+\S+Z\s+\S+Z\s+-$`} {
		if !regexp.MustCompile(re).MatchString(table) {
			t.Fatalf("client list lacks %s:\n%s", re, table)
		}
	}
	if _, err := os.Stat(c.bundle("mallory")); err == nil {
		t.Fatal("a refused issue wrote a bundle")
	}

	// The local admin revokes itself (its configuration leaked, say): every
	// client it issued goes with it, the command says its own certificate
	// did, and the sandboxes are untouched.
	out, errOut, code = c.as("", "client", "revoke", "admin")
	if code != 0 || !strings.Contains(out, "with it the certificate this command used") {
		t.Fatalf("the local admin revokes itself: exit %d\n%s%s", code, out, errOut)
	}
	for _, who := range []string{"", "vic", "bob", "carol"} {
		if _, errOut, code := c.as(who, "sandbox", "list"); code != 5 || !strings.Contains(errOut, "refused this client's certificate") {
			t.Fatalf("%q after revoking the local admin: exit %d %s", who, code, errOut)
		}
	}
	// Its next start issues the gateway a new local admin, and the
	// sandboxes were untouched.
	_ = w.gw.Process.Signal(syscall.SIGTERM)
	if err := <-w.gwDone; err != nil {
		t.Fatalf("gateway stop: %v", err)
	}
	w.startGateway()
	w.waitPhase("ops", "Ready", 30*time.Second, nil)
	unchanged("admin", "revoke of itself")
	if out, errOut, code := c.as("", "client", "list"); code != 0 || !regexp.MustCompile(`(?m)^admin\s+admin\s+-\s+gateway:local\s+\S+\s+\S+\s+\S+\s+-$`).MatchString(out) {
		t.Fatalf("client list with the new local admin: exit %d\n%s%s", code, out, errOut)
	}
}

// TestClusterClientRoles: in a cluster of two nodes, a request a node
// forwards to the sandbox's owner is checked there as its original
// caller's: bob's create through n1 placed on n2 is bob's there; carol
// (another operator) through n1 is refused by the owner, the sandbox
// unchanged; bob's stop through n1 is recorded by the owner as bob's. A
// client issued through one node works through the other (the records
// are etcd's), and revoking through n2 refuses it at n1's handshake.
func TestClusterClientRoles(t *testing.T) {
	cw := newClusterWorld(t, 2)
	n1, n2 := cw.nodes[0], cw.nodes[1]
	c := newClients(t, cw.world)
	for _, cl := range []struct{ name, role string }{{"vic", "viewer"}, {"bob", "operator"}, {"carol", "operator"}} {
		if code, out, errOut := c.issue("", cl.name, "--role", cl.role); code != 0 {
			t.Fatalf("issue %s: exit %d\n%s%s", cl.name, code, out, errOut)
		}
	}
	// bob creates through n1 until one is placed on n2.
	var name string
	for i := 0; i < 12 && name == ""; i++ {
		n := fmt.Sprintf("bob%d", i)
		if out, errOut, code := c.as("bob", "sandbox", "create", n, "--policy", cw.policy, "--", "/bin/sh", "-c", "exec sleep infinity"); code != 0 {
			t.Fatalf("bob's create of %s: exit %d\n%s%s", n, code, out, errOut)
		}
		if s := cw.waitPhase(n, "Ready", 30*time.Second, func(s status) bool { return s.Node != "" }); s.Node == n2.name {
			name = n
		}
	}
	if name == "" {
		t.Fatal("placement put none of 12 sandboxes on n2")
	}
	before, _ := cw.get(name)
	js, _, _ := cw.via(n1, "get", name, "-o", "json")
	if !strings.Contains(js, `"createdBy": "client:bob"`) {
		t.Fatalf("%s, created through n1 on n2, is not bob's:\n%s", name, js)
	}
	// Through n1 (the bundles name n1), owned by n2.
	if out, errOut, code := c.as("carol", "sandbox", "stop", name); code != 4 || !strings.Contains(errOut, "created by client:bob") {
		t.Fatalf("carol's stop of %s through n1: exit %d\n%s%s", name, code, out, errOut)
	}
	if out, errOut, code := c.as("vic", "sandbox", "delete", name); code != 4 || !strings.Contains(errOut, "viewer") {
		t.Fatalf("vic's delete of %s: exit %d\n%s%s", name, code, out, errOut)
	}
	if s, _ := cw.get(name); s.Phase != "Ready" || s.SupervisorPid != before.SupervisorPid {
		t.Fatalf("refused requests changed %s: %+v", name, s)
	}
	if out, errOut, code := c.as("bob", "sandbox", "stop", name); code != 0 {
		t.Fatalf("bob's stop of %s through n1: exit %d\n%s%s", name, code, out, errOut)
	}
	cw.waitPhase(name, "Stopped", 30*time.Second, nil)
	table, _, _ := cw.via(n2, "get", name)
	if !regexp.MustCompile(`(?m)^\s+\S+\s+Ready -> Stopping\s+-\s+client:bob$`).MatchString(table) ||
		!regexp.MustCompile(`(?m)^\s+\S+\s+Stopping -> Stopped\s+-\s+gateway:n2$`).MatchString(table) {
		t.Fatalf("the owner's record of bob's stop:\n%s", table)
	}
	// Revoked through n2: refused at n1's handshake.
	if out, errOut, code := run(t, nil, "client", "revoke", "bob", "--state-dir", cw.state, "--gateway", n2.addr); code != 0 {
		t.Fatalf("revoke bob through n2: exit %d\n%s%s", code, out, errOut)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, errOut, code := c.as("bob", "sandbox", "list")
		return code == 5 && strings.Contains(errOut, "refused this client's certificate")
	}, "n1 to refuse bob revoked through n2")
	if _, errOut, code := c.as("carol", "sandbox", "list"); code != 0 {
		t.Fatalf("carol after bob's revoke: exit %d %s", code, errOut)
	}
}

// TestRoleRefusalFloodBounded plays F7's attacker against a real
// gateway: a viewer sends 1,000 refused requests (delete) over one
// connection. Each is refused (exit 4's status), and the gateway's log
// keeps at most 20 lines of them (the listeners' bound), then, when the
// gateway stops (or the minute ends), one line counting the rest.
func TestRoleRefusalFloodBounded(t *testing.T) {
	w, c := viewerWorld(t)
	cl := c.dial("vic")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const flood = 1000
	for i := 0; i < flood; i++ {
		r, err := cl.Request(ctx, &messages.SandboxRequest{Name: "ops", Verb: messages.Verb_VERB_DELETE})
		if err == nil && r.Status != messages.Status_STATUS_REFUSED {
			t.Fatalf("request %d: %v", i, r)
		}
		if err != nil && !errdefs.Is(err, errdefs.KindRefused) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if s, code := w.get("ops"); code != 0 || s.Phase != "Ready" {
		t.Fatalf("ops after the flood: %s (exit %d)", s.Phase, code)
	}
	_ = w.gw.Process.Signal(syscall.SIGTERM)
	if err := <-w.gwDone; err != nil {
		t.Fatalf("gateway stop: %v", err)
	}
	lines, reports, notLogged := testenv.LimitedLines(w.gwLog.String(), "access", func(msg string) bool {
		return msg == "client request refused: its role does not allow it"
	})
	t.Logf("%d refused requests: %d lines, %d report(s) counting %d; gateway log %d bytes", flood, lines, reports, notLogged, len(w.gwLog.String()))
	// The minute may turn during the flood: a second window's lines.
	if lines == 0 || lines > 2*20 || reports == 0 || lines+notLogged != flood {
		t.Fatalf("%d lines and %d reports counting %d for %d refused requests, want at most 20 a minute and the rest counted", lines, reports, notLogged, flood)
	}
}

// TestLogsStreamsPerClientHeld plays F14's attacker against a real
// gateway: a viewer holds 4 follow streams of a sandbox over its
// connection; its fifth is refused (exit 4's kind, naming the cap) while
// the admin's follow is served; once the viewer ends one, it may open
// another.
func TestLogsStreamsPerClientHeld(t *testing.T) {
	_, c := viewerWorld(t)
	vic, admin := c.dial("vic"), c.dial("")
	// follow starts a follow on cl; it returns when the first batch came
	// (a stop func) or the stream's error.
	follow := func(cl *client.Client) (stop func(), err error) {
		ctx, cancel := context.WithCancel(context.Background())
		first, done := make(chan struct{}), make(chan error, 1)
		var once sync.Once
		go func() {
			done <- cl.Logs(ctx, &messages.LogsRequest{Name: "ops", Follow: true}, func(*messages.LogsBatch) error {
				once.Do(func() { close(first) })
				return nil
			})
		}()
		select {
		case <-first:
			return func() { cancel(); <-done }, nil
		case err := <-done:
			cancel()
			return nil, err
		case <-time.After(10 * time.Second):
			cancel()
			return nil, errors.New("no first batch within 10 s")
		}
	}
	var held []func()
	defer func() {
		for _, stop := range held {
			stop()
		}
	}()
	for i := 0; i < 4; i++ {
		stop, err := follow(vic)
		if err != nil {
			t.Fatalf("vic's follow %d: %v", i+1, err)
		}
		held = append(held, stop)
	}
	if stop, err := follow(vic); err == nil {
		stop()
		t.Fatal("vic's fifth follow stream was served")
	} else if !errdefs.Is(err, errdefs.KindRefused) || !strings.Contains(err.Error(), "already holds 4 logs streams of sandbox ops") {
		t.Fatalf("vic's fifth follow: %v, want refused naming the cap", err)
	}
	stop, err := follow(admin)
	if err != nil {
		t.Fatalf("the admin's follow beside vic's 4: %v", err)
	}
	held = append(held, stop)
	// vic ends one: room for another.
	held[0]()
	held = held[1:]
	testenv.Eventually(t, 10*time.Second, func() bool {
		stop, err := follow(vic)
		if err == nil {
			held = append(held, stop)
		}
		return err == nil
	}, "vic to open a stream after ending one")
}

// viewerWorld is a gateway with a viewer client, vic, and a sandbox, ops.
func viewerWorld(t *testing.T) (*world, *clients) {
	t.Helper()
	w := newWorld(t, 0)
	c := newClients(t, w)
	if code, out, errOut := c.issue("", "vic", "--role", "viewer"); code != 0 {
		t.Fatalf("issue vic: exit %d\n%s%s", code, out, errOut)
	}
	w.create("ops", "exec sleep infinity")
	return w, c
}

// dial connects to the gateway through the client package as client name
// ("" for the local admin), as a program using it would.
func (c *clients) dial(name string) *client.Client {
	c.t.Helper()
	path := c.bundle(name)
	if name == "" {
		path = contract.StateDir(c.w.state).ClientConfig()
	}
	cfg, err := trust.ReadClientConfig(path)
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := client.Dial(c.w.addr, cfg, zerolog.Nop())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}
