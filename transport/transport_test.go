package transport_test

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"math/big"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// acceptWait is how long a stream must stay open for its batch to count
// as accepted; refusals come back in milliseconds.
const acceptWait = 300 * time.Millisecond

// waitFor is the deadline of every poll.
const waitFor = 5 * time.Second

// Actor ids of the gateway's sandbox a and b session actors.
var (
	sessionA = transport.GatewaySessionPrefix("a") + "1"
	sessionB = transport.GatewaySessionPrefix("b") + "1"
)

var (
	alice   = trust.Identity{Role: trust.RoleClient, Name: "alice"}
	mallory = trust.Identity{Role: trust.RoleClient, Name: "mallory"}
	supA    = trust.Identity{Role: trust.RoleSupervisor, Name: "a"}
)

// quiet is an actor system whose protoactor logs go nowhere.
func quiet() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
}

// eventually polls cond every 5 ms until it holds or waitFor passes.
func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+format, append([]any{waitFor}, args...)...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// record is one message an actor received.
type record struct {
	msg    any
	peer   trust.Identity
	remote bool // a PeerHeader was present
	header map[string]string
}

// recorder is an actor that records what it receives and answers a Reply
// to a sender.
type recorder struct {
	mu  sync.Mutex
	got []record
}

func (r *recorder) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*actor.Started); ok {
		return
	}
	id, remote := transport.Peer(ctx)
	var hdr map[string]string
	if h := ctx.MessageHeader(); h != nil {
		hdr = h.ToMap()
	}
	r.mu.Lock()
	r.got = append(r.got, record{msg: ctx.Message(), peer: id, remote: remote, header: hdr})
	r.mu.Unlock()
	if ctx.Sender() != nil {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK, Message: "recorded"})
	}
}

func (r *recorder) records() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.got...)
}

// gateway is a gateway node's endpoint (GatewayRules) with recording
// actors at api, hello, gateway/sandboxes and the session actors of
// sandboxes a and b.
type gateway struct {
	t       *testing.T
	ca      *trust.CA
	pool    *trustPool
	sys     *actor.ActorSystem
	addr    string
	refused *transport.Refusals
	actors  map[string]*recorder

	mu      sync.Mutex
	revoked map[string]bool // serials (decimal)
}

// trustPool is the victim's CA pool (for the legitimate side).
type trustPool = trust.Verifier

func startGateway(t *testing.T) *gateway {
	t.Helper()
	ca, _, err := trust.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatalf("LoadOrCreateCA: %v", err)
	}
	g := &gateway{t: t, ca: ca, refused: transport.NewRefusals(), actors: map[string]*recorder{}, revoked: map[string]bool{}}
	ver := g.verifier(trust.RoleClient, trust.RoleSupervisor, trust.RoleGateway)
	ver.Revoked = g.isRevoked
	g.sys = quiet()
	rem, err := transport.Start(g.sys, transport.Config{Host: "127.0.0.1", Cert: g.cert(trust.Identity{Role: trust.RoleGateway, Name: "node1"}),
		Verifier: ver, Rules: transport.GatewayRules(), Log: zerolog.Nop(), Refused: g.refused})
	if err != nil {
		t.Fatalf("transport.Start: %v", err)
	}
	t.Cleanup(func() {
		rem.Shutdown(false)
		g.sys.Shutdown()
	})
	g.addr = g.sys.Address()
	for _, id := range []string{transport.APIActor, transport.HelloActor, transport.SandboxesActor, sessionA, sessionB} {
		r := &recorder{}
		if _, err := g.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), id); err != nil {
			t.Fatalf("spawn %s: %v", id, err)
		}
		g.actors[id] = r
	}
	return g
}

// verifier trusts g's CA and accepts roles.
func (g *gateway) verifier(roles ...trust.Role) *trust.Verifier {
	g.t.Helper()
	pool, err := trust.Pool(g.ca.CertPEM)
	if err != nil {
		g.t.Fatalf("Pool: %v", err)
	}
	return &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(roles...)}
}

func (g *gateway) isRevoked(serial *big.Int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.revoked[serial.String()]
}

func (g *gateway) revoke(kp tls.Certificate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked[kp.Leaf.SerialNumber.String()] = true
}

// cert issues a key pair for id from g's CA.
func (g *gateway) cert(id trust.Identity) tls.Certificate {
	g.t.Helper()
	certPEM, keyPEM, _, err := g.ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		g.t.Fatalf("IssueKeyPair(%s): %v", id, err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		g.t.Fatalf("KeyPair: %v", err)
	}
	return kp
}

func (g *gateway) pid(id string) *actor.PID { return actor.NewPID(g.addr, id) }

// dial connects to g with conf (nil: plaintext); closed at cleanup.
func (g *gateway) dial(conf *tls.Config) *transporttest.Conn {
	g.t.Helper()
	return dial(g.t, g.addr, conf)
}

func dial(t *testing.T, addr string, conf *tls.Config) *transporttest.Conn {
	t.Helper()
	c, err := transporttest.Dial(addr, conf)
	if err != nil {
		t.Fatalf("Dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// as dials g presenting a fresh certificate of id.
func (g *gateway) as(id trust.Identity) *transporttest.Conn {
	g.t.Helper()
	return g.dial(transporttest.WithCert(g.cert(id)))
}

func (g *gateway) recorded(id string) []record { return g.actors[id].records() }

// nothingDelivered fails unless no recording actor received anything.
func (g *gateway) nothingDelivered() {
	g.t.Helper()
	for id, r := range g.actors {
		if got := r.records(); len(got) != 0 {
			g.t.Errorf("actor %q received %d message(s) after a refusal, first %T %v", id, len(got), got[0].msg, got[0].msg)
		}
	}
}

// refused fails unless err is a refusal (with code, unless code is OK) and
// the counter of reason passes before.
func (g *gateway) refused1(err error, code codes.Code, reason string, before int64) {
	g.t.Helper()
	if !transporttest.Refused(err) {
		g.t.Fatalf("want a refusal (%s), got %v", reason, err)
	}
	if code != codes.OK {
		if got := status.Code(err); got != code {
			g.t.Errorf("refusal code %s (%v), want %s", got, err, code)
		}
	}
	eventually(g.t, func() bool { return g.refused.Get(reason) > before }, "refusal counter %q stays at %d", reason, before)
}

// serves checks that g still serves a legitimate client: a ListRequest to
// api from a fresh client certificate is accepted, delivered with the
// client's identity, and is the only message api has received since want
// earlier ones; then api answers a local request.
func (g *gateway) serves(earlier int) {
	g.t.Helper()
	legit := trust.Identity{Role: trust.RoleClient, Name: "legit"}
	if err := g.as(legit).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		g.t.Fatalf("legitimate ListRequest refused: %v", err)
	}
	eventually(g.t, func() bool { return len(g.recorded(transport.APIActor)) > earlier }, "api never received the legitimate ListRequest")
	got := g.recorded(transport.APIActor)
	if len(got) != earlier+1 {
		g.t.Fatalf("api received %d messages, want %d: %v", len(got), earlier+1, got)
	}
	last := got[earlier]
	if _, ok := last.msg.(*messages.ListRequest); !ok || !last.remote || last.peer != legit {
		g.t.Fatalf("api received %T from %v (remote %v), want *messages.ListRequest from %s", last.msg, last.peer, last.remote, legit)
	}
	res, err := g.sys.Root.RequestFuture(g.sys.NewLocalPID(transport.APIActor), &messages.ListRequest{}, waitFor).Result()
	if err != nil {
		g.t.Fatalf("api does not answer: %v", err)
	}
	if _, ok := res.(*messages.Reply); !ok {
		g.t.Fatalf("api answered %T, want *messages.Reply", res)
	}
}

// TestHandshakeRefused: plaintext, no certificate, another CA, a revoked
// certificate and TLS 1.2 are refused at the handshake, for the unary
// methods and the stream alike; nothing is delivered and the endpoint
// keeps serving.
func TestHandshakeRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	otherClient, err := transporttest.OtherCA(filepath.Join(t.TempDir(), "other"), alice)
	if err != nil {
		t.Fatal(err)
	}
	otherGateway, err := transporttest.OtherCA(filepath.Join(t.TempDir(), "other2"), trust.Identity{Role: trust.RoleGateway, Name: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	revoked := g.cert(mallory)
	g.revoke(revoked)
	tls12 := transporttest.WithCert(g.cert(alice))
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	for _, tc := range []struct {
		name string
		conf *tls.Config
	}{
		{"plaintext", nil},
		{"no_certificate", transporttest.NoCertTLS()},
		{"other_ca_client", otherClient},
		{"other_ca_gateway", otherGateway},
		{"revoked", transporttest.WithCert(revoked)},
		{"tls12", tls12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.refused.Get(transport.ReasonHandshake)
			c := g.dial(tc.conf)
			err := c.Unary("ListProcesses")
			g.refused1(err, codes.Unavailable, transport.ReasonHandshake, before)
			before = g.refused.Get(transport.ReasonHandshake)
			err = c.Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait)
			g.refused1(err, codes.Unavailable, transport.ReasonHandshake, before)
			t.Logf("refused: %v", err)
			if n := g.refused.Get(transport.ReasonUnimplemented); n != 0 {
				t.Errorf("a refused handshake reached the unary handler (%d)", n)
			}
			g.nothingDelivered()
		})
	}
	g.serves(0)
}

// TestRevokedAtNextHandshake: a certificate revoked after it was used is
// refused at its next connection.
func TestRevokedAtNextHandshake(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	kp := g.cert(mallory)
	if err := g.dial(transporttest.WithCert(kp)).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received mallory's request")
	g.revoke(kp)
	before := g.refused.Get(transport.ReasonHandshake)
	err := g.dial(transporttest.WithCert(kp)).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait)
	g.refused1(err, codes.Unavailable, transport.ReasonHandshake, before)
	if n := len(g.recorded(transport.APIActor)); n != 1 {
		t.Fatalf("api received %d messages, want only the one before revocation", n)
	}
	g.serves(1)
}

// TestUnaryUnimplemented: protoactor's ListProcesses and
// GetProcessDiagnostics panic "implement me"; the endpoint answers
// Unimplemented instead and lives.
func TestUnaryUnimplemented(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	for i, id := range []trust.Identity{alice, supA} {
		c := g.as(id)
		for j, m := range []string{"ListProcesses", "GetProcessDiagnostics"} {
			before := int64(2*i + j)
			g.refused1(c.Unary(m), codes.Unimplemented, transport.ReasonUnimplemented, before)
		}
	}
	if err := g.as(alice).Unary("Nope"); err == nil || transporttest.Refused(err) {
		t.Errorf("Unary(unknown method) = %v, want a local error", err)
	}
	if n := g.refused.Get(transport.ReasonPanic); n != 0 {
		t.Errorf("%d panics", n)
	}
	g.nothingDelivered()
	g.serves(0)
}

// TestBatchRefused: a client with a valid certificate sends what the rules
// do not admit; each batch is refused whole, nothing is delivered, the
// reason is counted and the endpoint keeps serving.
func TestBatchRefused(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	api := g.pid(transport.APIActor)
	list := &messages.ListRequest{}
	for _, tc := range []struct {
		name   string
		batch  func() *remote.MessageBatch
		code   codes.Code
		reason string
	}{
		{"target_out_of_range", func() *remote.MessageBatch { return transporttest.OutOfRange(api, list) }, codes.PermissionDenied, transport.ReasonMalformed},
		{"type_out_of_range", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.Envelopes[0].TypeId = 3
			return b
		}, codes.PermissionDenied, transport.ReasonMalformed},
		{"sender_out_of_range", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.Envelopes[0].Sender = 1
			return b
		}, codes.PermissionDenied, transport.ReasonMalformed},
		{"negative_target", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.Envelopes[0].Target = -1
			return b
		}, codes.PermissionDenied, transport.ReasonMalformed},
		{"json_serializer", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.Envelopes[0].SerializerId = 1
			return b
		}, codes.PermissionDenied, transport.ReasonMalformed},
		{"stop", func() *remote.MessageBatch { return transporttest.Stop(api) }, codes.PermissionDenied, transport.ReasonSystemMessage},
		{"poison_pill", func() *remote.MessageBatch { return transporttest.Batch(api, &actor.PoisonPill{}, nil) }, codes.PermissionDenied, transport.ReasonSystemMessage},
		{"watch", func() *remote.MessageBatch {
			return transporttest.Batch(api, &actor.Watch{Watcher: actor.NewPID("127.0.0.1:1", "x")}, nil)
		}, codes.PermissionDenied, transport.ReasonSystemMessage},
		{"terminated", func() *remote.MessageBatch {
			return transporttest.Batch(api, &actor.Terminated{Who: g.pid(transport.SandboxesActor)}, nil)
		}, codes.PermissionDenied, transport.ReasonSystemMessage},
		{"sandboxes", func() *remote.MessageBatch {
			return transporttest.Batch(g.pid(transport.SandboxesActor), list, nil)
		}, codes.PermissionDenied, transport.ReasonTarget},
		{"session", func() *remote.MessageBatch {
			return transporttest.Batch(g.pid(sessionA), &messages.Heartbeat{Sandbox: "a"}, nil)
		}, codes.PermissionDenied, transport.ReasonTarget},
		{"hello_actor", func() *remote.MessageBatch {
			return transporttest.Batch(g.pid(transport.HelloActor), &messages.Hello{Sandbox: "a"}, nil)
		}, codes.PermissionDenied, transport.ReasonTarget},
		{"future", func() *remote.MessageBatch {
			return transporttest.Batch(g.pid("future$1"), &messages.Reply{}, nil)
		}, codes.PermissionDenied, transport.ReasonTarget},
		{"hello_to_api", func() *remote.MessageBatch {
			return transporttest.Batch(api, &messages.Hello{Sandbox: "a"}, nil)
		}, codes.PermissionDenied, transport.ReasonMessageType},
		{"unknown_type", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.TypeNames[0] = "stockade.v1.NoSuchMessage"
			return b
		}, codes.PermissionDenied, transport.ReasonMessageType},
		{"too_large", func() *remote.MessageBatch {
			return transporttest.Large(api, transport.MaxMessageBytes+1<<10)
		}, codes.ResourceExhausted, transport.ReasonTooLarge},
		{"sender_other_host", func() *remote.MessageBatch {
			return transporttest.Batch(api, list, actor.NewPID("10.9.9.9:1", "future$1"))
		}, codes.PermissionDenied, transport.ReasonSender},
		{"sender_no_port", func() *remote.MessageBatch {
			return transporttest.Batch(api, list, actor.NewPID("nonhost", "future$1"))
		}, codes.PermissionDenied, transport.ReasonSender},
		{"good_then_bad", func() *remote.MessageBatch {
			// One good envelope, then one to gateway/sandboxes: the whole
			// batch is refused, the good one is not delivered either.
			b := transporttest.Batch(api, list, nil)
			b.Targets = append(b.Targets, g.pid(transport.SandboxesActor))
			b.Envelopes = append(b.Envelopes, &remote.MessageEnvelope{MessageData: b.Envelopes[0].MessageData, Target: 1})
			return b
		}, codes.PermissionDenied, transport.ReasonTarget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.refused.Get(tc.reason)
			total := g.refused.Total()
			err := g.as(alice).Send(tc.batch(), acceptWait)
			g.refused1(err, tc.code, tc.reason, before)
			if d := g.refused.Total() - total; d != 1 {
				t.Errorf("%d refusals counted, want 1", d)
			}
			g.nothingDelivered()
		})
	}
	if n := g.refused.Get(transport.ReasonPanic); n != 0 {
		t.Errorf("%d panics", n)
	}
	g.serves(0) // api was not stopped
}

// TestHeaderStamped: an admitted envelope carries the peer's real identity
// in PeerHeader, whatever headers the peer sent.
func TestHeaderStamped(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	b := transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil)
	b.Envelopes[0].MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{
		transport.PeerHeader: "gateway:evil",
		"x-forged":           "1",
	}}
	if err := g.as(alice).Send(b, acceptWait); err != nil {
		t.Fatalf("ListRequest with a forged header: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the request")
	r := g.recorded(transport.APIActor)[0]
	if !r.remote || r.peer != alice {
		t.Fatalf("Peer = %v (remote %v), want %s", r.peer, r.remote, alice)
	}
	if want := map[string]string{transport.PeerHeader: alice.String()}; len(r.header) != 1 || r.header[transport.PeerHeader] != want[transport.PeerHeader] {
		t.Fatalf("header %v, want only %v", r.header, want)
	}
	if n := g.refused.Total(); n != 0 {
		t.Fatalf("%d refusals", n)
	}
	g.serves(1)
}

// TestSenderOwnAddress: a reply address on the peer's host but equal to
// the endpoint's own address would make the api's Reply a local message
// (no peer header, so trusted by transport.Caller) to any local actor,
// past the rules. It must be refused like any other foreign reply address.
func TestSenderOwnAddress(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	before := g.refused.Get(transport.ReasonSender)
	err := g.as(alice).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{},
		g.pid(transport.SandboxesActor)), acceptWait)
	if err == nil {
		eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the request")
		time.Sleep(50 * time.Millisecond) // let the api's Reply land, if it goes somewhere
		t.Fatalf("a reply address at the endpoint's own address %s was admitted; %s then received %d local message(s): %+v",
			g.addr, transport.SandboxesActor, len(g.recorded(transport.SandboxesActor)), g.recorded(transport.SandboxesActor))
	}
	g.refused1(err, codes.PermissionDenied, transport.ReasonSender, before)
	g.nothingDelivered()
	g.serves(0)
}

// TestSupervisorRoutes: the supervisor of sandbox a says Hello to the hello
// actor and talks to a's session actors only.
func TestSupervisorRoutes(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	sup := g.as(supA)
	accepted := func(target string, m proto.Message) {
		t.Helper()
		if err := sup.Send(transporttest.Batch(g.pid(target), m, nil), acceptWait); err != nil {
			t.Fatalf("%T to %s refused: %v", m, target, err)
		}
		eventually(t, func() bool { return len(g.recorded(target)) == 1 }, "%s never received %T", target, m)
		r := g.recorded(target)[0]
		if !proto.Equal(r.msg.(proto.Message), m) || !r.remote || r.peer != supA {
			t.Fatalf("%s received %v from %v (remote %v), want %v from %s", target, r.msg, r.peer, r.remote, m, supA)
		}
	}
	accepted(transport.HelloActor, &messages.Hello{Sandbox: "a", Instance: "i1"})
	accepted(sessionA, &messages.Heartbeat{Sandbox: "a", Instance: "i1", Seq: 1})

	for _, tc := range []struct {
		target string
		msg    proto.Message
		reason string
	}{
		{sessionB, &messages.Heartbeat{Sandbox: "b", Seq: 1}, transport.ReasonTarget},
		{transport.SandboxActorID("a"), &messages.Heartbeat{Sandbox: "a"}, transport.ReasonTarget},
		{sessionA + "/x", &messages.Heartbeat{Sandbox: "a"}, transport.ReasonTarget},
		{transport.GatewaySessionPrefix("ab") + "1", &messages.Heartbeat{Sandbox: "ab"}, transport.ReasonTarget},
		{transport.APIActor, &messages.ListRequest{}, transport.ReasonTarget},
		{transport.APIActor, &messages.Heartbeat{Sandbox: "a"}, transport.ReasonTarget},
		{sessionA, &messages.Hello{Sandbox: "a"}, transport.ReasonMessageType},
		{transport.HelloActor, &messages.Heartbeat{Sandbox: "a"}, transport.ReasonMessageType},
		{"future$1", &messages.SetPolicy{Sandbox: "a"}, transport.ReasonMessageType},
	} {
		before := g.refused.Get(tc.reason)
		err := sup.Send(transporttest.Batch(g.pid(tc.target), tc.msg, nil), acceptWait)
		g.refused1(err, codes.PermissionDenied, tc.reason, before)
	}
	for id, want := range map[string]int{transport.HelloActor: 1, sessionA: 1, sessionB: 0, transport.APIActor: 0, transport.SandboxesActor: 0} {
		if n := len(g.recorded(id)); n != want {
			t.Errorf("%s received %d messages, want %d", id, n, want)
		}
	}
	g.serves(0)
}

// TestRoundTrip: a real protoactor client (its own endpoint, ClientRules)
// asks the gateway's api and gets the Reply: the gateway dials back to the
// client's endpoint over mutual TLS. The client's endpoint refuses a
// client certificate (it accepts gateways only).
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	csys := quiet()
	crefused := transport.NewRefusals()
	crem, err := transport.Start(csys, transport.Config{Host: "127.0.0.1", Cert: g.cert(alice),
		Verifier: g.verifier(trust.RoleGateway), Rules: transport.ClientRules(), Log: zerolog.Nop(), Refused: crefused})
	if err != nil {
		t.Fatalf("client transport.Start: %v", err)
	}
	t.Cleanup(func() {
		crem.Shutdown(false)
		csys.Shutdown()
	})
	res, err := csys.Root.RequestFuture(g.pid(transport.APIActor), &messages.ListRequest{}, waitFor).Result()
	if err != nil {
		t.Fatalf("request: %v (gateway refusals %d, client refusals %d)", err, g.refused.Total(), crefused.Total())
	}
	if r, ok := res.(*messages.Reply); !ok || r.Message != "recorded" {
		t.Fatalf("reply %T %v, want the api's Reply", res, res)
	}
	got := g.recorded(transport.APIActor)
	if len(got) != 1 || got[0].peer != alice || !got[0].remote {
		t.Fatalf("api records %+v, want one request from %s", got, alice)
	}
	if n, m := g.refused.Total(), crefused.Total(); n != 0 || m != 0 {
		t.Fatalf("refusals: gateway %d, client %d", n, m)
	}

	// Another client cannot talk to the client's endpoint.
	err = dial(t, csys.Address(), transporttest.WithCert(g.cert(mallory))).Send(
		transporttest.Batch(actor.NewPID(csys.Address(), "future$1"), &messages.Reply{}, nil), acceptWait)
	if !transporttest.Refused(err) {
		t.Fatalf("client cert to the client's endpoint: %v, want refused", err)
	}
	eventually(t, func() bool { return crefused.Get(transport.ReasonHandshake) == 1 }, "client endpoint did not count the handshake")
	// A second request still works.
	if _, err := csys.Root.RequestFuture(g.pid(transport.APIActor), &messages.ListRequest{}, waitFor).Result(); err != nil {
		t.Fatalf("second request: %v", err)
	}
}

// TestRefused: the classification of errors.
func TestRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("tls: handshake failure"), false}, // not a gRPC status
		{status.Error(codes.PermissionDenied, "refused: target"), true},
		{status.Error(codes.InvalidArgument, "x"), true},
		{status.Error(codes.ResourceExhausted, "x"), true},
		{status.Error(codes.Unauthenticated, "x"), true},
		{status.Error(codes.Unimplemented, "x"), true},
		{status.Error(codes.Internal, "x"), true},
		{status.Error(codes.Unavailable, "connection error: desc = \"error reading server preface: remote error: tls: certificate required\""), true},
		{status.Error(codes.Unavailable, "connection error: desc = \"error reading server preface: EOF\""), true},
		{status.Error(codes.Unavailable, "read: connection reset by peer"), true},
		{status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\""), false},
		{status.Error(codes.DeadlineExceeded, "x"), false},
		{status.Error(codes.Canceled, "x"), false},
		{status.Error(codes.OK, ""), false},
	} {
		if got := transporttest.Refused(tc.err); got != tc.want {
			t.Errorf("Refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestDialDead: a server that is not there is no refusal.
func TestDialDead(t *testing.T) {
	t.Parallel()
	c := dial(t, "127.0.0.1:1", transporttest.NoCertTLS())
	err := c.Send(transporttest.Batch(actor.NewPID("127.0.0.1:1", "api"), &messages.ListRequest{}, nil), acceptWait)
	if err == nil || transporttest.Refused(err) {
		t.Fatalf("Send to a closed port = %v, want a non-refusal error", err)
	}
}
