package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// nothingCreated fails t if sandbox name has a record or a supervisor.
func (w *world) nothingCreated(name string) {
	w.t.Helper()
	if _, err := w.record(name); !isNotFound(err) {
		w.t.Errorf("sandbox %s has a record after a refused create: %v", name, err)
	}
	if n := len(w.drv.Procs(name)); n != 0 {
		w.t.Errorf("sandbox %s has %d supervisors after a refused create", name, n)
	}
	if r := w.get(name); r.Status != messages.Status_STATUS_NOT_FOUND {
		w.t.Errorf("get %s after a refused create: %v", name, r.Status)
	}
}

// refusedWith fails t unless r is Refused (exit 4) and its message holds
// each of want.
func refusedWith(t *testing.T, what string, r *messages.Reply, want ...string) {
	t.Helper()
	if r.Status != messages.Status_STATUS_REFUSED {
		t.Fatalf("%s: %v %q, want REFUSED", what, r.Status, r.Message)
	}
	for _, s := range want {
		if !strings.Contains(r.Message, s) {
			t.Fatalf("%s: %q lacks %q", what, r.Message, s)
		}
	}
}

// TestOperatorCannotLiftLimits plays F1's attacker: an operator asks for
// no limit (-1 or none) on each of a sandbox's limits, or for more than
// the gateway's default, or for a policy with stockade.allow_ptrace. Each
// is refused (exit 4) naming the limit, the operator's role and what
// works, and nothing is created. Asking for less than the defaults works,
// and an admin may ask for any of it.
func TestOperatorCannotLiftLimits(t *testing.T) {
	w := newWorld(t)
	w.clients.Set("otto", access.Grant{Role: access.Operator})
	w.clients.Set("ada", access.Grant{Role: access.Admin})
	pol := []byte("version: 1\n")
	ptrace := []byte("version: 1\nstockade:\n  allow_ptrace: true\n")
	def := DefaultLimits()
	for _, tc := range []struct {
		limits *messages.Limits
		policy []byte
		want   string
	}{
		{&messages.Limits{MemoryBytes: -1}, pol, "--memory none (no limit)"},
		{&messages.Limits{Pids: -1}, pol, "--pids -1 (no limit)"},
		{&messages.Limits{Cpus: -1}, pol, "--cpus -1 (no limit)"},
		{&messages.Limits{IoBps: -1}, pol, "--io-bps none (no limit)"},
		{&messages.Limits{LogBytes: -1}, pol, "--log-size none (no limit)"},
		{&messages.Limits{LogLinesPerSec: -1}, pol, "--log-rate -1 (no limit)"},
		{&messages.Limits{MemoryBytes: def.MemoryBytes * 2}, pol, "--memory 4 GiB (above the gateway's default, 2 GiB)"},
		{&messages.Limits{Pids: def.Pids + 1}, pol, "--pids 513 (above the gateway's default, 512)"},
		{&messages.Limits{LogBytes: def.LogBytes * 4}, pol, "--log-size 256 MiB (above the gateway's default, 64 MiB)"},
		{&messages.Limits{LogBurst: def.LogBurst * 10}, pol, "--log-burst 100000 (above the gateway's default, 10000)"},
		{nil, ptrace, "stockade.allow_ptrace: true"},
		// All of F1's at once: each is named.
		{&messages.Limits{MemoryBytes: -1, Pids: -1, Cpus: -1, LogBytes: -1, LogLinesPerSec: -1}, ptrace, "--memory none (no limit), --cpus -1 (no limit)"},
	} {
		r := w.askAs("client:otto", &messages.CreateRequest{Name: "opbox", Policy: tc.policy, Limits: tc.limits})
		refusedWith(t, "create with "+tc.want, r, "client:otto is an operator client", tc.want, "only an admin client may", "ask for at most the gateway's defaults")
		w.nothingCreated("opbox")
	}
	// Less than the defaults: the operator's to ask.
	small := &messages.Limits{MemoryBytes: 256 << 20, Pids: 64, Cpus: 0.5, LogBytes: 1 << 20, LogLinesPerSec: 10, IoBps: 1 << 20}
	if r := w.askAs("client:otto", &messages.CreateRequest{Name: "small", Policy: pol, Limits: small}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("operator's create within the defaults: %v", r)
	}
	if l := w.mustRecord("small").Spec.Limits; l.MemoryBytes != 256<<20 || l.Pids != 64 || l.LogLinesPerSec != 10 {
		t.Fatalf("small's limits: %+v", l)
	}
	// An admin client: anything.
	if r := w.askAs("client:ada", &messages.CreateRequest{Name: "big", Policy: ptrace, Limits: &messages.Limits{MemoryBytes: -1, Pids: -1, LogBytes: -1}}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("admin's create without limits: %v", r)
	}
	if l := w.mustRecord("big").Spec.Limits; l.MemoryBytes != -1 || l.Pids != -1 || l.LogBytes != -1 {
		t.Fatalf("big's limits: %+v", l)
	}
}

// TestOperatorCannotAllowPtrace: an operator's policy set that turns
// stockade.allow_ptrace on, on its own sandbox, is refused (exit 4) and
// the policy is unchanged (version, content, no push to the supervisor);
// once an admin turned it on, the operator's sets may keep it.
func TestOperatorCannotAllowPtrace(t *testing.T) {
	w := newWorld(t)
	w.clients.Set("otto", access.Grant{Role: access.Operator})
	w.clients.Set("ada", access.Grant{Role: access.Admin})
	if r := w.askAs("client:otto", &messages.CreateRequest{Name: "ottos", Policy: []byte("version: 1\n")}); r.Status != messages.Status_STATUS_OK {
		t.Fatal(r)
	}
	if ack := w.hello("ottos"); ack.Status != messages.Status_STATUS_OK {
		t.Fatal(ack)
	}
	w.waitPhase("ottos", "Ready")
	ptrace := []byte("version: 1\nstockade:\n  allow_ptrace: true\n")
	before := w.snap("ottos")
	r := w.askAs("client:otto", &messages.PolicyRequest{Name: "ottos", Policy: ptrace})
	refusedWith(t, "operator's policy set with allow_ptrace", r, "client:otto is an operator client", "set the policy of sandbox ottos", "stockade.allow_ptrace: true", "have an admin client set it")
	if after := w.snap("ottos"); after != before {
		t.Fatalf("the refused policy set changed ottos: %+v -> %+v", before, after)
	}
	if rec := w.mustRecord("ottos"); rec.Spec.Policy != "version: 1\n" || rec.Spec.PolicyVersion != 1 {
		t.Fatalf("policy after the refused set: v%d %q", rec.Spec.PolicyVersion, rec.Spec.Policy)
	}
	for done := time.After(200 * time.Millisecond); ; {
		select {
		case m := <-w.policies:
			if m.Version != 1 || strings.Contains(string(m.Policy), "allow_ptrace") {
				t.Fatalf("the refused policy was pushed: version %d %q", m.Version, m.Policy)
			}
			continue // the start's own push of version 1
		case <-done:
		}
		break
	}
	// The admin turns it on; the operator may then change other rules and
	// keep it.
	if r := w.askAs("client:ada", &messages.PolicyRequest{Name: "ottos", Policy: ptrace}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("admin's policy set with allow_ptrace: %v", r)
	}
	if r := w.askAs("client:otto", &messages.PolicyRequest{Name: "ottos", Policy: append(ptrace, "# v3\n"...)}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("operator's set keeping the admin's allow_ptrace: %v", r)
	}
}

// TestGrantedNameNotSquatted plays F6's attacker: the admin granted
// "build" to ci; mallory, another operator, creates "build" first. The
// create is refused (exit 4) naming ci, and nothing is created; ci, its
// only grantee, and an admin may create it. A name granted to two
// clients is the admin's to create.
func TestGrantedNameNotSquatted(t *testing.T) {
	w := newWorld(t)
	w.clients.Set("ci", access.Grant{Role: access.Operator, Sandboxes: []string{"build", "shared"}})
	w.clients.Set("qa", access.Grant{Role: access.Operator, Sandboxes: []string{"shared"}})
	w.clients.Set("mallory", access.Grant{Role: access.Operator})
	pol := []byte("version: 1\n")
	r := w.askAs("client:mallory", &messages.CreateRequest{Name: "build", Policy: pol})
	refusedWith(t, "mallory's create of build", r, "client:mallory may not create sandbox build", "granted to client ci", "only an admin client")
	w.nothingCreated("build")
	r = w.askAs("client:ci", &messages.CreateRequest{Name: "shared", Policy: pol})
	refusedWith(t, "ci's create of shared (granted to qa too)", r, "granted to client qa")
	w.nothingCreated("shared")
	if r := w.askAs("client:ci", &messages.CreateRequest{Name: "build", Policy: pol}); r.Status != messages.Status_STATUS_OK || r.Sandbox.CreatedBy != "client:ci" {
		t.Fatalf("ci's create of build, granted to it alone: %v", r)
	}
	if r := w.create("shared"); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("the admin's create of shared: %v", r)
	}
}

// TestSandboxQuotaPerClient: an operator holds at most the gateway's
// quota of sandboxes it created; the next create is refused (exit 4)
// naming them, nothing is created; deleting one makes room; an admin has
// no quota, and another operator has its own.
func TestSandboxQuotaPerClient(t *testing.T) {
	w := newWorld(t)
	w.env.MaxSandboxesPerClient = 2
	w.clients.Set("otto", access.Grant{Role: access.Operator})
	w.clients.Set("olga", access.Grant{Role: access.Operator})
	pol := []byte("version: 1\n")
	for _, n := range []string{"o1", "o2"} {
		if r := w.askAs("client:otto", &messages.CreateRequest{Name: n, Policy: pol}); r.Status != messages.Status_STATUS_OK {
			t.Fatalf("otto's create of %s: %v", n, r)
		}
	}
	r := w.askAs("client:otto", &messages.CreateRequest{Name: "o3", Policy: pol})
	refusedWith(t, "otto's third", r, "client:otto already has 2 sandboxes (o1, o2)", "--max-sandboxes-per-client")
	w.nothingCreated("o3")
	if r := w.askAs("client:olga", &messages.CreateRequest{Name: "g1", Policy: pol}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("olga's first: %v", r)
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		if r := w.create(n); r.Status != messages.Status_STATUS_OK {
			t.Fatalf("the admin's create of %s: %v", n, r)
		}
	}
	if r := w.askAs("client:otto", &messages.SandboxRequest{Name: "o1", Verb: messages.Verb_VERB_DELETE}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("otto deletes o1: %v", r)
	}
	w.waitFor("o1 to be gone", func() bool { return w.get("o1").Status == messages.Status_STATUS_NOT_FOUND })
	if r := w.askAs("client:otto", &messages.CreateRequest{Name: "o3", Policy: pol}); r.Status != messages.Status_STATUS_OK {
		t.Fatalf("otto's create after deleting one: %v", r)
	}
}

// TestRefusalFloodLogBounded plays F7's attacker: a viewer sends 1,000
// refused requests (delete) in a row. The gateway's log keeps at most
// transport.DefaultLogRefusals lines of them and then one line with the
// count of the rest; every request is still answered Refused.
func TestRefusalFloodLogBounded(t *testing.T) {
	w := newWorld(t)
	w.clients.Set("vera", access.Grant{Role: access.Viewer})
	w.ready("box")
	const flood = 1000
	for i := 0; i < flood; i++ {
		if r := w.askAs("client:vera", &messages.SandboxRequest{Name: "box", Verb: messages.Verb_VERB_DELETE}); r.Status != messages.Status_STATUS_REFUSED {
			t.Fatalf("request %d: %v", i, r)
		}
	}
	w.env.Refusals.Flush() // the window's report, now rather than in a minute
	refusals, reports, notLogged := testenv.LimitedLines(w.log.String(), "access", func(msg string) bool {
		return msg == "client request refused: its role does not allow it"
	})
	t.Logf("%d refused requests: %d lines, %d report(s) counting %d, log %d bytes", flood, refusals, reports, notLogged, len(w.log.String()))
	if refusals > transport.DefaultLogRefusals || refusals == 0 {
		t.Fatalf("%d refusal lines for %d refused requests, want 1 to %d", refusals, flood, transport.DefaultLogRefusals)
	}
	if reports != 1 || refusals+notLogged != flood {
		t.Fatalf("%d report lines counting %d, want one counting the %d not logged", reports, notLogged, flood-refusals)
	}
	if !strings.Contains(w.log.String(), "refused client requests since") {
		t.Fatalf("the report line does not say what it counts:\n%s", w.log)
	}
}

// askAs sends req as peer (e.g. "client:vera") with the stream actor as
// its sender.
func (c *logsClient) askAs(peer string, req *messages.LogsRequest) {
	c.w.sys.Root.Send(c.w.boxes, &actor.MessageEnvelope{Header: map[string]string{transport.PeerHeader: peer}, Message: req, Sender: c.pid})
}

// TestLogsStreamsPerClient plays F14's attacker: a viewer holds
// logsPerClient follow streams of a sandbox and cannot take another (exit
// 4 naming the cap), while an admin can; viewers together hold at most
// logsMaxStreams, and admins still get streams of their own.
func TestLogsStreamsPerClient(t *testing.T) {
	w := newWorld(t)
	w.ready("box")
	var viewers []string
	for i := 1; i <= logsMaxStreams/logsPerClient+1; i++ {
		name := "v" + string(rune('0'+i))
		viewers = append(viewers, name)
		w.clients.Set(name, access.Grant{Role: access.Viewer})
	}
	w.clients.Set("ada", access.Grant{Role: access.Admin})
	open := func(peer, id string) (*logsClient, *messages.LogsBatch, *messages.Reply) {
		t.Helper()
		c := w.logsClient(id)
		c.askAs(peer, &messages.LogsRequest{Name: "box", Follow: true})
		select {
		case b := <-c.batches:
			return c, b, nil
		case r := <-c.replies:
			return c, nil, r
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no answer to a logs request", peer)
		}
		return nil, nil, nil
	}
	// v1 holds its 4; its fifth is refused; the admin's is served.
	for i := 0; i < logsPerClient; i++ {
		if _, b, r := open("client:"+viewers[0], "v1-"+string(rune('a'+i))); b == nil {
			t.Fatalf("v1's stream %d: %v", i+1, r)
		}
	}
	_, b, r := open("client:"+viewers[0], "v1-over")
	if b != nil {
		t.Fatalf("v1's fifth follow stream was served (batch %d)", b.Seq)
	}
	refusedWith(t, "v1's fifth stream", r, "client:v1 already holds 4 logs streams of sandbox box")
	if _, b, r := open("client:ada", "ada-1"); b == nil {
		t.Fatalf("the admin's stream beside v1's 4: %v", r)
	}
	// v2..v4 fill the viewers' 16; v5 waits; the admin still gets one.
	for _, v := range viewers[1 : len(viewers)-1] {
		for i := 0; i < logsPerClient; i++ {
			if _, b, r := open("client:"+v, v+"-"+string(rune('a'+i))); b == nil {
				t.Fatalf("%s's stream %d: %v", v, i+1, r)
			}
		}
	}
	last := viewers[len(viewers)-1]
	if _, b, r := open("client:"+last, last+"-a"); b != nil || r.Status != messages.Status_STATUS_UNAVAILABLE {
		t.Fatalf("%s's stream with the viewers' %d taken: batch %v, reply %v, want UNAVAILABLE", last, logsMaxStreams, b, r)
	}
	if _, b, r := open("client:ada", "ada-2"); b == nil {
		t.Fatalf("the admin's stream with the viewers' %d taken: %v", logsMaxStreams, r)
	}
	if _, b, r := open("", "local-1"); b == nil { // this process: an admin's
		t.Fatalf("an in-process stream: %v", r)
	}
}
