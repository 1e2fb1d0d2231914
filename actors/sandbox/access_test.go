package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/actors/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
)

// askAs sends msg to the sandboxes actor as a remote peer's (e.g.
// "client:bob") arrives.
func (w *world) askAs(peer string, msg any) *messages.Reply {
	w.t.Helper()
	res, err := sandboxtest.RequestAs(w.sys, w.boxes, peer, msg, 5*time.Second)
	if err != nil {
		w.t.Fatalf("%s %T: no answer: %v", peer, msg, err)
	}
	r, ok := res.(*messages.Reply)
	if !ok {
		w.t.Fatalf("%s %T: answered %T", peer, msg, res)
	}
	return r
}

// snapshot is what a refused request must leave as it was.
type snapshot struct {
	phase         string
	supervisorPID int
	revision      uint64
	transitions   int
	policyVersion uint64
	procs         int
}

func (w *world) snap(name string) snapshot {
	w.t.Helper()
	rec, err := w.record(name)
	if err != nil {
		w.t.Fatal(err)
	}
	return snapshot{phase: w.phase(name), supervisorPID: rec.SupervisorPID, revision: rec.Revision,
		transitions: len(rec.Lifecycle.Transitions), policyVersion: rec.Spec.PolicyVersion, procs: len(w.drv.Procs(name))}
}

// TestRolesAtTheSandboxActors plays clients of each role against the
// sandboxes and sandbox actors (the gateway's API checks the role first;
// these check again, with the sandbox's creator): a viewer reads but
// cannot create, change, run or arm faults; an operator drives what it
// created or was granted and nothing else; a client without a live
// certificate record and a supervisor speaking as a client are refused.
// Each refusal is Refused (exit 4) naming the role, and the sandbox is
// unchanged: same phase, supervisor pid, record revision, transitions,
// policy version, no supervisor started. What is allowed records who
// asked: the creator, each transition's by, the policy's setter, the
// lifecycle audit.
func TestRolesAtTheSandboxActors(t *testing.T) {
	w := newWorld(t)
	w.clients.Set("vera", access.Grant{Role: access.Viewer})
	w.clients.Set("otto", access.Grant{Role: access.Operator})
	w.clients.Set("olga", access.Grant{Role: access.Operator, Sandboxes: []string{"shared"}})
	w.clients.Set("ada", access.Grant{Role: access.Admin})
	policy := []byte("version: 1\n")

	// otto creates his own; the gateway (local) creates "shared" and "theirs".
	if r := w.askAs("client:otto", &messages.CreateRequest{Name: "ottos", Policy: policy}); r.Status != messages.Status_STATUS_OK || r.Sandbox.CreatedBy != "client:otto" {
		t.Fatalf("otto's create: %v", r)
	}
	if ack := w.hello("ottos"); ack.Status != messages.Status_STATUS_OK {
		t.Fatal(ack)
	}
	w.waitPhase("ottos", "Ready")
	w.ready("shared")
	w.ready("theirs")

	refused := func(who string, msg any, name, role string) {
		t.Helper()
		before := w.snap(name)
		r := w.askAs(who, msg)
		if r.Status != messages.Status_STATUS_REFUSED || !strings.Contains(r.Message, strings.TrimPrefix(who, "client:")) || !strings.Contains(r.Message, role) {
			t.Errorf("%s %T on %s: %v %q, want REFUSED naming %s and %s", who, msg, name, r.Status, r.Message, who, role)
		}
		if after := w.snap(name); after != before {
			t.Errorf("%s %T on %s changed it: %+v -> %+v", who, msg, name, before, after)
		}
	}
	change := func(name string) []any {
		var out []any
		for _, v := range verbs {
			out = append(out, &messages.SandboxRequest{Name: name, Verb: v.wire})
		}
		return append(out, &messages.PolicyRequest{Name: name, Policy: policy}, &messages.RelayRequest{Name: name})
	}

	// The viewer: reads everything, nothing else.
	for _, msg := range []any{&messages.SandboxRequest{Name: "ottos", Verb: messages.Verb_VERB_GET}, &messages.ListRequest{},
		&messages.PolicyRequest{Name: "ottos"}} {
		if r := w.askAs("client:vera", msg); r.Status != messages.Status_STATUS_OK {
			t.Errorf("viewer %T: %v", msg, r)
		}
	}
	for _, msg := range append(change("ottos"), &messages.FaultRequest{Name: "ottos", Rule: "identity.lookup=panic:1"}) {
		refused("client:vera", msg, "ottos", "viewer")
	}
	if r := w.askAs("client:vera", &messages.CreateRequest{Name: "veras", Policy: policy}); r.Status != messages.Status_STATUS_REFUSED || !strings.Contains(r.Message, "viewer") {
		t.Errorf("viewer create: %v", r)
	}
	if _, err := w.record("veras"); err == nil || len(w.drv.Procs("veras")) != 0 {
		t.Error("the viewer's create made a sandbox")
	}

	// An operator: not another's sandbox (nor one made before creators
	// were recorded, which is nobody's), but the one granted to it.
	for _, msg := range change("ottos") {
		refused("client:olga", msg, "ottos", "operator")
	}
	for _, msg := range change("theirs") {
		refused("client:otto", msg, "theirs", "operator")
	}
	refused("client:olga", &messages.FaultRequest{Name: "shared", Rule: "identity.lookup=panic:1"}, "shared", "operator")
	if r := w.askAs("client:olga", &messages.SandboxRequest{Name: "shared", Verb: messages.Verb_VERB_STOP}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("operator stop of a granted sandbox: %v", r)
	}

	// No live certificate record; a supervisor's certificate: refused.
	refused("client:zed", &messages.SandboxRequest{Name: "ottos", Verb: messages.Verb_VERB_GET}, "ottos", "client zed has no live certificate")
	before := w.snap("ottos")
	if r := w.askAs("supervisor:ottos", &messages.SandboxRequest{Name: "ottos", Verb: messages.Verb_VERB_STOP}); r.Status != messages.Status_STATUS_UNAUTHENTICATED {
		t.Errorf("a supervisor's stop: %v", r)
	}
	if w.snap("ottos") != before {
		t.Error("a supervisor's stop changed the sandbox")
	}

	// otto drives his own: each step is his in the record, get and audit.
	if r := w.askAs("client:otto", &messages.PolicyRequest{Name: "ottos", Policy: []byte("version: 1\n# v2\n")}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("otto's policy set: %v", r)
	}
	if r := w.askAs("client:otto", &messages.SandboxRequest{Name: "ottos", Verb: messages.Verb_VERB_STOP}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("otto's stop: %v", r)
	}
	w.waitPhase("ottos", "Stopped")
	if r := w.askAs("client:ada", &messages.SandboxRequest{Name: "ottos", Verb: messages.Verb_VERB_START}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("the admin's start of otto's sandbox: %v", r)
	}
	rec, err := w.record("ottos")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Spec.CreatedBy != "client:otto" || rec.Spec.PolicyBy != "client:otto" || rec.Spec.PolicyVersion != 2 || rec.Spec.PolicyHistory[0].By != "client:otto" {
		t.Fatalf("record: created by %q, policy %d by %q (history %+v)", rec.Spec.CreatedBy, rec.Spec.PolicyVersion, rec.Spec.PolicyBy, rec.Spec.PolicyHistory)
	}
	var got []string
	for _, tr := range rec.Lifecycle.Transitions {
		got = append(got, tr.From.String()+">"+tr.To.String()+" "+tr.By)
	}
	want := "None>Provisioning client:otto|Provisioning>Ready supervisor:ottos|Ready>Stopping client:otto|Stopping>Stopped gateway:local|Stopped>Provisioning client:ada"
	if strings.Join(got, "|") != want {
		t.Fatalf("transitions:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	st := w.get("ottos").Sandbox
	if st.CreatedBy != "client:otto" || st.Transitions[2].By != "client:otto" {
		t.Fatalf("get: created by %q, transitions %v", st.CreatedBy, st.Transitions)
	}
	lifecycleFile := filepath.Join(testenv.Path(t)(w.env.LogDir("ottos", rec.Spec.UID)), contract.LifecycleLog)
	var msgs []string
	defer func() {
		if t.Failed() {
			t.Logf("%s:\n%s", lifecycleFile, strings.Join(msgs, "\n"))
		}
	}()
	w.waitFor("the lifecycle audit to name who asked", func() bool {
		msgs = nil
		b, _ := os.ReadFile(lifecycleFile)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e struct {
				Message  string            `json:"message"`
				Unmapped map[string]string `json:"unmapped"`
			}
			if json.Unmarshal([]byte(line), &e) == nil {
				msgs = append(msgs, e.Message+" ["+e.Unmapped["by"]+"]")
			}
		}
		return slices.Contains(msgs, "Ready -> Stopping: stop requested by client:otto [client:otto]") &&
			slices.Contains(msgs, "policy version 1 -> 2 by client:otto [client:otto]") &&
			slices.Contains(msgs, "Stopped -> Provisioning: start requested by client:ada [client:ada]")
	})
}
