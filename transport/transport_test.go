package transport_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/internal/testenv"
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

// wellFormedReply is an id of the form of transport.NewFuture's reply
// addresses (none is registered under it).
const wellFormedReply = "reply$0123456789abcdef0123456789abcdef"

// Actor ids of the gateway's sandbox a and b session actors, and of a
// logs stream of a.
var (
	sessionA = transport.GatewaySessionPrefix("a") + "1"
	sessionB = transport.GatewaySessionPrefix("b") + "1"
	logsA    = transport.SandboxActorID("a") + "/logs/00ff"
)

var (
	alice   = trust.Identity{Role: trust.RoleClient, Name: "alice"}
	mallory = trust.Identity{Role: trust.RoleClient, Name: "mallory"}
	supA    = trust.Identity{Role: trust.RoleSupervisor, Name: "a"}
)

// quiet is an actor system whose protoactor logs go nowhere.
func quiet() *actor.ActorSystem { return actor.NewActorSystem(quietOption()) }

// quietOption sends protoactor's logs nowhere.
func quietOption() actor.ConfigOption {
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) })
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
	host   string         // transport.PeerHost
	via    trust.Identity // transport.Forwarded
	fwd    bool           // a ViaHeader was present
	sender *actor.PID
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
	via, fwd := transport.Forwarded(ctx)
	r.mu.Lock()
	r.got = append(r.got, record{msg: ctx.Message(), peer: id, remote: remote, header: hdr,
		host: transport.PeerHost(ctx), via: via, fwd: fwd, sender: ctx.Sender()})
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

func (r *recorder) reset() {
	r.mu.Lock()
	r.got = nil
	r.mu.Unlock()
}

// gateway is a gateway node's endpoint, node1, with recording actors at
// api, hello, gateway/sandboxes and the session actors of sandboxes a and
// b. It is a node of a cluster (ClusterRules: GatewayRules, and other
// gateway nodes forward clients' requests and supervisors' Hello); a
// single node's table (GatewayRules) is tested in a child process
// (TestGatewayRulesRefuseGateway).
//
// There is one per test process, started in TestMain before any other
// grpc activity, and the other endpoints (the round trip's client, a
// forwarding node) run in child processes: protoactor's remote.Start sets grpc's global logger
// (grpclog.SetLoggerV2, unsynchronized), which races with every grpc
// goroutine already running in the process, so a process may start only
// one endpoint to stay clean under -race.
type gateway struct {
	ca      *trust.CA
	sys     *actor.ActorSystem
	addr    string
	refused *transport.Refusals
	log     *testenv.Buffer
	ep      *transport.Endpoint
	actors  map[string]*recorder
	revoked transporttest.Revocations
}

// gw is this process's gateway endpoint.
var gw *gateway

// gatewayLimits are gw's: a short handshake timeout and small caps, for
// the tests of the deadline and the caps (limits_test.go,
// established_test.go), a short idle timeout and a quick sweep; its log
// keeps every refusal, which tests look for (the log's bound is
// TestAdmitRefusalLogBound's).
var gatewayLimits = transport.Limits{HandshakeTimeout: 2 * time.Second, PendingPerSource: 8, PendingTotal: 40, LogRefusals: 1 << 20,
	ClientConns: 6, IdleTimeout: time.Second, SweepEvery: 200 * time.Millisecond}

// newGateway starts a gateway endpoint with a new CA in dir.
func newGateway(dir string) (g *gateway, stop func(), err error) {
	ca, _, err := trust.LoadOrCreateCA(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, nil, err
	}
	g = &gateway{ca: ca, refused: transport.NewRefusals(), actors: map[string]*recorder{}}
	ver, err := verifier(ca.CertPEM, trust.RoleClient, trust.RoleSupervisor, trust.RoleGateway)
	if err != nil {
		return nil, nil, err
	}
	ver.Revoked = g.revoked.Revoked
	node, err := issue(ca, node1)
	if err != nil {
		return nil, nil, err
	}
	g.sys = quiet()
	g.log = &testenv.Buffer{}
	rem, err := transport.Start(g.sys, transport.Config{Host: "127.0.0.1", Cert: node,
		Verifier: ver, Rules: transport.ClusterRules(), Log: zerolog.New(g.log), Refused: g.refused, Limits: gatewayLimits})
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		rem.Shutdown(false)
		g.sys.Shutdown()
	}
	g.addr, g.ep = g.sys.Address(), rem
	for _, id := range []string{transport.APIActor, transport.HelloActor, transport.SandboxesActor, sessionA, sessionB, logsA} {
		r := &recorder{}
		if _, err := g.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), id); err != nil {
			stop()
			return nil, nil, fmt.Errorf("spawn %s: %w", id, err)
		}
		g.actors[id] = r
	}
	return g, stop, nil
}

// useGateway returns gw with empty recorders. Tests that use it do not
// run in parallel (they count what the actors received).
func useGateway(t *testing.T) *gateway {
	t.Helper()
	if gw == nil {
		t.Fatal("no gateway (TestMain)")
	}
	for _, r := range gw.actors {
		r.reset()
	}
	return gw
}

// verifier trusts caPEM and accepts roles.
func verifier(caPEM []byte, roles ...trust.Role) (*trust.Verifier, error) {
	pool, err := trust.Pool(caPEM)
	if err != nil {
		return nil, err
	}
	return &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(roles...)}, nil
}

// issue issues a key pair for id from ca.
func issue(ca *trust.CA, id trust.Identity) (tls.Certificate, error) {
	certPEM, keyPEM, _, err := ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		return tls.Certificate{}, err
	}
	return trust.KeyPair(certPEM, keyPEM)
}

func (g *gateway) revoke(kp tls.Certificate) { g.revoked.Revoke(kp) }

// cert issues a key pair for id from g's CA.
func (g *gateway) cert(t *testing.T, id trust.Identity) tls.Certificate {
	t.Helper()
	kp, err := issue(g.ca, id)
	if err != nil {
		t.Fatalf("issue %s: %v", id, err)
	}
	return kp
}

func (g *gateway) pid(id string) *actor.PID { return actor.NewPID(g.addr, id) }

// pendingTotal is how many connections g holds in their handshake.
func (g *gateway) pendingTotal() int {
	total, _ := g.ep.Admission().Pending()
	return total
}

// dial connects to addr with conf (nil: plaintext); closed at cleanup.
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
func (g *gateway) as(t *testing.T, id trust.Identity) *transporttest.Conn {
	t.Helper()
	return dial(t, g.addr, transporttest.WithCert(g.cert(t, id)))
}

func (g *gateway) recorded(id string) []record { return g.actors[id].records() }

// nothingDelivered fails unless no recording actor received anything.
func (g *gateway) nothingDelivered(t *testing.T) {
	t.Helper()
	for id, r := range g.actors {
		if got := r.records(); len(got) != 0 {
			t.Errorf("actor %q received %d message(s) after a refusal, first %T %v", id, len(got), got[0].msg, got[0].msg)
		}
	}
}

// wantRefused fails unless err is a refusal (with code, unless code is OK)
// and the counter of reason passes before.
func (g *gateway) wantRefused(t *testing.T, err error, code codes.Code, reason string, before int64) {
	t.Helper()
	if !transporttest.Refused(err) {
		t.Fatalf("want a refusal (%s), got %v", reason, err)
	}
	if code != codes.OK {
		if got := status.Code(err); got != code {
			t.Errorf("refusal code %s (%v), want %s", got, err, code)
		}
	}
	eventually(t, func() bool { return g.refused.Get(reason) > before }, "refusal counter %q stays at %d", reason, before)
}

// serves checks that g still serves a legitimate client: a ListRequest to
// api from a fresh client certificate is accepted, delivered with the
// client's identity, and is the only message api has received since
// earlier ones; then api answers a local request (it was not stopped).
func (g *gateway) serves(t *testing.T, earlier int) {
	t.Helper()
	legit := trust.Identity{Role: trust.RoleClient, Name: "legit"}
	if err := g.as(t, legit).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		t.Fatalf("legitimate ListRequest refused: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) > earlier }, "api never received the legitimate ListRequest")
	got := g.recorded(transport.APIActor)
	if len(got) != earlier+1 {
		t.Fatalf("api received %d messages, want %d: %+v", len(got), earlier+1, got)
	}
	last := got[earlier]
	if _, ok := last.msg.(*messages.ListRequest); !ok || !last.remote || last.peer != legit {
		t.Fatalf("api received %T from %v (remote %v), want *messages.ListRequest from %s", last.msg, last.peer, last.remote, legit)
	}
	res, err := g.sys.Root.RequestFuture(g.sys.NewLocalPID(transport.APIActor), &messages.ListRequest{}, waitFor).Result()
	if err != nil {
		t.Fatalf("api does not answer: %v", err)
	}
	if _, ok := res.(*messages.Reply); !ok {
		t.Fatalf("api answered %T, want *messages.Reply", res)
	}
}

// TestMain starts this process's one gateway endpoint, or runs as the
// round trip's client (a child process of TestRoundTrip) or as another
// child (clusterChild).
func TestMain(m *testing.M) {
	if mode := os.Getenv(clusterModeEnv); mode != "" {
		os.Exit(clusterChild(mode, os.Getenv(clusterDirEnv), os.Getenv(gatewayEnv)))
	}
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(roundTripChild(dir, os.Getenv(gatewayEnv)))
	}
	os.Exit(runWithGateway(m))
}

func runWithGateway(m *testing.M) int {
	dir, err := os.MkdirTemp("", "transport-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	g, stop, err := newGateway(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start gateway:", err)
		return 1
	}
	defer stop()
	gw = g
	return m.Run()
}

// TestHandshakeRefused: plaintext, no certificate, another CA, a revoked
// certificate and TLS 1.2 are refused at the handshake, for the unary
// methods and the stream alike; nothing is delivered and the endpoint
// keeps serving.
func TestHandshakeRefused(t *testing.T) {
	g := useGateway(t)
	otherClient, err := transporttest.OtherCA(filepath.Join(t.TempDir(), "other"), alice)
	if err != nil {
		t.Fatal(err)
	}
	otherGateway, err := transporttest.OtherCA(filepath.Join(t.TempDir(), "other2"), trust.Identity{Role: trust.RoleGateway, Name: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	revoked := g.cert(t, mallory)
	g.revoke(revoked)
	tls12 := transporttest.WithCert(g.cert(t, alice))
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	unimplemented := g.refused.Get(transport.ReasonUnimplemented)
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
			// A fresh connection each: a failed channel answers from its
			// last error without a new handshake until its backoff ends.
			before := g.refused.Get(transport.ReasonHandshake)
			err := dial(t, g.addr, tc.conf).Unary("ListProcesses")
			g.wantRefused(t, err, codes.Unavailable, transport.ReasonHandshake, before)
			before = g.refused.Get(transport.ReasonHandshake)
			err = dial(t, g.addr, tc.conf).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait)
			g.wantRefused(t, err, codes.Unavailable, transport.ReasonHandshake, before)
			if n := g.refused.Get(transport.ReasonUnimplemented) - unimplemented; n != 0 {
				t.Errorf("a refused handshake reached the unary handler (%d)", n)
			}
			g.nothingDelivered(t)
		})
	}
	g.serves(t, 0)
}

// TestRevokedAtNextHandshake: a certificate revoked after it was used is
// refused at its next connection.
func TestRevokedAtNextHandshake(t *testing.T) {
	g := useGateway(t)
	kp := g.cert(t, mallory)
	list := transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil)
	if err := dial(t, g.addr, transporttest.WithCert(kp)).Send(list, acceptWait); err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received mallory's request")
	g.revoke(kp)
	before := g.refused.Get(transport.ReasonHandshake)
	err := dial(t, g.addr, transporttest.WithCert(kp)).Send(list, acceptWait)
	g.wantRefused(t, err, codes.Unavailable, transport.ReasonHandshake, before)
	if n := len(g.recorded(transport.APIActor)); n != 1 {
		t.Fatalf("api received %d messages, want only the one before revocation", n)
	}
	g.serves(t, 1)
}

// TestUnaryUnimplemented: protoactor's ListProcesses and
// GetProcessDiagnostics panic "implement me"; the endpoint answers
// Unimplemented instead and lives.
func TestUnaryUnimplemented(t *testing.T) {
	g := useGateway(t)
	panics := g.refused.Get(transport.ReasonPanic)
	for _, id := range []trust.Identity{alice, supA} {
		c := g.as(t, id)
		for _, m := range []string{"ListProcesses", "GetProcessDiagnostics"} {
			before := g.refused.Get(transport.ReasonUnimplemented)
			g.wantRefused(t, c.Unary(m), codes.Unimplemented, transport.ReasonUnimplemented, before)
		}
	}
	if err := g.as(t, alice).Unary("Nope"); err == nil || transporttest.Refused(err) {
		t.Errorf("Unary(unknown method) = %v, want a local error", err)
	}
	if n := g.refused.Get(transport.ReasonPanic) - panics; n != 0 {
		t.Errorf("%d panics", n)
	}
	g.nothingDelivered(t)
	g.serves(t, 0)
}

// TestBatchRefused: a client with a valid certificate sends what the rules
// do not admit; each batch is refused whole, nothing is delivered, the
// reason is counted and the endpoint keeps serving.
func TestBatchRefused(t *testing.T) {
	g := useGateway(t)
	panics := g.refused.Get(transport.ReasonPanic)
	api := g.pid(transport.APIActor)
	list := &messages.ListRequest{}
	for _, tc := range []struct {
		name   string
		batch  func() *remote.MessageBatch
		code   codes.Code
		reason string
	}{
		{"target_out_of_range", func() *remote.MessageBatch { return transporttest.OutOfRange(api, list) }, codes.PermissionDenied, transport.ReasonMalformed},
		{"negative_target", func() *remote.MessageBatch {
			b := transporttest.Batch(api, list, nil)
			b.Envelopes[0].Target = -1
			return b
		}, codes.PermissionDenied, transport.ReasonMalformed},
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
		{"sender_local", func() *remote.MessageBatch {
			return transporttest.Batch(api, list, actor.NewPID("nonhost", transport.SandboxesActor))
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
			err := g.as(t, alice).Send(tc.batch(), acceptWait)
			g.wantRefused(t, err, tc.code, tc.reason, before)
			if d := g.refused.Total() - total; d != 1 {
				t.Errorf("%d refusals counted, want 1", d)
			}
			g.nothingDelivered(t)
		})
	}
	if n := g.refused.Get(transport.ReasonPanic) - panics; n != 0 {
		t.Errorf("%d panics", n)
	}
	g.serves(t, 0) // and api was not stopped
}

// TestHeaderStamped: an admitted envelope carries the peer's real identity
// in PeerHeader, whatever headers the peer sent.
func TestHeaderStamped(t *testing.T) {
	g := useGateway(t)
	total := g.refused.Total()
	b := transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil)
	b.Envelopes[0].MessageHeader = &remote.MessageHeader{HeaderData: map[string]string{
		transport.PeerHeader:     "gateway:evil",
		transport.PeerAddrHeader: "10.9.9.9:1",
		"x-forged":               "1",
	}}
	if err := g.as(t, alice).Send(b, acceptWait); err != nil {
		t.Fatalf("ListRequest with a forged header: %v", err)
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the request")
	r := g.recorded(transport.APIActor)[0]
	if !r.remote || r.peer != alice {
		t.Fatalf("Peer = %v (remote %v), want %s", r.peer, r.remote, alice)
	}
	if len(r.header) != 2 || r.header[transport.PeerHeader] != alice.String() || !strings.HasPrefix(r.header[transport.PeerAddrHeader], "127.0.0.1:") {
		t.Fatalf("header %v, want only %s: %s and %s: 127.0.0.1:PORT", r.header, transport.PeerHeader, alice, transport.PeerAddrHeader)
	}
	if n := g.refused.Total() - total; n != 0 {
		t.Fatalf("%d refusals", n)
	}
	g.serves(t, 1)
}

// TestSenderOwnAddress: a reply address on the peer's host that is the
// endpoint's own address would make the api's Reply a local message (no
// peer header, so trusted by transport.Caller) to any local actor, past
// the rules. It must be refused like any other foreign reply address.
func TestSenderOwnAddress(t *testing.T) {
	g := useGateway(t)
	before := g.refused.Get(transport.ReasonSender)
	err := g.as(t, alice).Send(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{},
		g.pid(transport.SandboxesActor)), acceptWait)
	if err == nil {
		eventually(t, func() bool { return len(g.recorded(transport.SandboxesActor)) > 0 }, "the api's Reply did not land")
		r := g.recorded(transport.SandboxesActor)[0]
		t.Fatalf("a reply address at the endpoint's own address %s was admitted: %s received %T (remote %v); "+
			"checkedStream.check must refuse a sender whose Address is the endpoint's own", g.addr, transport.SandboxesActor, r.msg, r.remote)
	}
	g.wantRefused(t, err, codes.PermissionDenied, transport.ReasonSender, before)
	g.nothingDelivered(t)
	g.serves(t, 0)
}

// TestTargetOtherAddress: protoactor's endpoint reader sends each envelope
// to its target PID as given, address included, so a target on another
// address makes this endpoint forward the message there itself (it dials
// out with its own certificate): a relay for any peer to any host:port.
// Such a target must be refused.
func TestTargetOtherAddress(t *testing.T) {
	g := useGateway(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan struct{}, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
		dialed <- struct{}{}
	}()
	before := g.refused.Get(transport.ReasonTarget)
	err = g.as(t, alice).Send(transporttest.Batch(actor.NewPID(ln.Addr().String(), transport.APIActor), &messages.ListRequest{}, nil), acceptWait)
	select {
	case <-dialed:
		t.Fatalf("the gateway forwarded a client's envelope to %s (Send: %v); "+
			"checkedStream.check must refuse a target whose Address is not the endpoint's own", ln.Addr(), err)
	case <-time.After(100 * time.Millisecond):
	}
	g.wantRefused(t, err, codes.PermissionDenied, transport.ReasonTarget, before)
	g.nothingDelivered(t)
	g.serves(t, 0)
}

// TestSupervisorRoutes: the supervisor of sandbox a says Hello to the hello
// actor and talks to a's session actors only.
func TestSupervisorRoutes(t *testing.T) {
	g := useGateway(t)
	sup := g.as(t, supA)
	accepted := func(target string, m proto.Message) {
		t.Helper()
		if err := sup.Send(transporttest.Batch(g.pid(target), m, nil), acceptWait); err != nil {
			t.Fatalf("%T to %s refused: %v", m, target, err)
		}
		eventually(t, func() bool { return len(g.recorded(target)) == 1 }, "%s never received %T", target, m)
		r := g.recorded(target)[0]
		if got, ok := r.msg.(proto.Message); !ok || !proto.Equal(got, m) || !r.remote || r.peer != supA {
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
		{transport.SandboxesActor, &messages.Hello{Sandbox: "a"}, transport.ReasonTarget},
		{sessionA, &messages.Hello{Sandbox: "a"}, transport.ReasonMessageType},
		{transport.HelloActor, &messages.Heartbeat{Sandbox: "a"}, transport.ReasonMessageType},
		{wellFormedReply, &messages.SetPolicy{Sandbox: "a"}, transport.ReasonMessageType},
	} {
		before := g.refused.Get(tc.reason)
		err := sup.Send(transporttest.Batch(g.pid(tc.target), tc.msg, nil), acceptWait)
		g.wantRefused(t, err, codes.PermissionDenied, tc.reason, before)
	}
	for id, want := range map[string]int{transport.HelloActor: 1, sessionA: 1, sessionB: 0, transport.APIActor: 0, transport.SandboxesActor: 0} {
		if n := len(g.recorded(id)); n != want {
			t.Errorf("%s received %d messages, want %d", id, n, want)
		}
	}
	g.serves(t, 0)
}

// Environment of the round trip's client (a child process of this test
// binary): the directory of its key material and the gateway's address.
const (
	childEnv   = "STOCKADE_TRANSPORT_TEST_CLIENT_DIR"
	gatewayEnv = "STOCKADE_TRANSPORT_TEST_GATEWAY"
)

// TestRoundTrip: a real protoactor client (its own endpoint, ClientRules,
// in a child process: see gateway) asks the gateway's api twice and gets
// the Replies: the gateway dials back to the client's endpoint over mutual
// TLS. In between, the client's endpoint refuses another client's
// certificate (it accepts gateways only).
func TestRoundTrip(t *testing.T) {
	g := useGateway(t)
	total := g.refused.Total()
	dir := t.TempDir()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", g.ca.CertPEM)
	for _, id := range []trust.Identity{alice, mallory, node2} {
		certPEM, keyPEM, _, err := g.ca.IssueKeyPair(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		write(id.Name+".crt", certPEM)
		write(id.Name+".key", keyPEM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, gatewayEnv+"="+g.addr)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "round trip ok") {
		t.Fatalf("client: %v\n%s", err, out)
	}
	got := g.recorded(transport.APIActor)
	if len(got) != 3 {
		t.Fatalf("api received %d messages, want 3: %+v", len(got), got)
	}
	for i, r := range got {
		_, list := r.msg.(*messages.ListRequest)
		_, logs := r.msg.(*messages.LogsRequest)
		if (i < 2 && !list) || (i == 2 && !logs) || r.peer != alice || !r.remote {
			t.Fatalf("api received %T from %v (remote %v), want two ListRequests and a LogsRequest from %s", r.msg, r.peer, r.remote, alice)
		}
	}
	if n := g.refused.Total() - total; n != 0 {
		t.Fatalf("gateway refused %d", n)
	}
}

// roundTripChild is the client of TestRoundTrip: exit 0 and "round trip
// ok" on success.
func roundTripChild(dir, gatewayAddr string) int {
	if err := roundTrip(dir, gatewayAddr); err != nil {
		fmt.Fprintln(os.Stderr, "round trip:", err)
		return 1
	}
	fmt.Println("round trip ok")
	return 0
}

func roundTrip(dir, gatewayAddr string) error {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			panic(err)
		}
		return b
	}
	ver, err := verifier(read("ca.crt"), trust.RoleGateway)
	if err != nil {
		return err
	}
	kp, err := trust.KeyPair(read("alice.crt"), read("alice.key"))
	if err != nil {
		return err
	}
	other, err := trust.KeyPair(read("mallory.crt"), read("mallory.key"))
	if err != nil {
		return err
	}
	sys := quiet()
	refused := transport.NewRefusals()
	rem, err := transport.Start(sys, transport.Config{Host: "127.0.0.1", Cert: kp, Verifier: ver,
		Rules: transport.ClientRules(), Log: zerolog.Nop(), Refused: refused})
	if err != nil {
		return err
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	api := actor.NewPID(gatewayAddr, transport.APIActor)
	for i := range 2 {
		res, err := transport.Request(sys.Root, api, &messages.ListRequest{}, waitFor, transport.AnyGateway()).Result()
		if err != nil {
			return fmt.Errorf("request %d: %w (client refusals %d)", i, err, refused.Total())
		}
		if r, ok := res.(*messages.Reply); !ok || r.Message != "recorded" {
			return fmt.Errorf("request %d: reply %T %v, want the api's Reply", i, res, res)
		}
		if i > 0 {
			break
		}
		// A client's certificate cannot talk to a client's endpoint.
		c, err := transporttest.Dial(sys.Address(), transporttest.WithCert(other))
		if err != nil {
			return err
		}
		err = c.Send(transporttest.Batch(actor.NewPID(sys.Address(), "future$1"), &messages.Reply{}, nil), acceptWait)
		_ = c.Close()
		if !transporttest.Refused(err) {
			return fmt.Errorf("a client certificate at the client's endpoint: %v, want refused", err)
		}
		deadline := time.Now().Add(waitFor)
		for refused.Get(transport.ReasonHandshake) != 1 {
			if time.Now().After(deadline) {
				return errors.New("the client's endpoint did not count the refused handshake")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := refused.Total(); n != 1 {
		return fmt.Errorf("client refusals %d, want 1 (the handshake)", n)
	}
	gwKP, err := trust.KeyPair(read(node2.Name+".crt"), read(node2.Name+".key"))
	if err != nil {
		return err
	}
	return streamRoutes(sys, api, gwKP, refused)
}

// node2 is a gateway node's identity (the round trip's client checks what
// a gateway may send to its stream actors).
var node2 = trust.Identity{Role: trust.RoleGateway, Name: "node2"}

// streamRoutes: the gateway answers a LogsRequest at the client's stream
// actor (its sender), over the wire; a gateway may send batches and
// replies to stream actors of the narrow form only.
func streamRoutes(sys *actor.ActorSystem, api *actor.PID, gwKP tls.Certificate, refused *transport.Refusals) error {
	got := make(chan any, 8)
	stream, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.Reply, *messages.LogsBatch:
			got <- m
		}
	}), transport.ClientStreamPrefix+"00ff")
	if err != nil {
		return err
	}
	sys.Root.RequestWithCustomSender(api, &messages.LogsRequest{Name: "a"}, stream)
	select {
	case m := <-got:
		if r, ok := m.(*messages.Reply); !ok || r.Message != "recorded" {
			return fmt.Errorf("the stream actor received %T %v, want the api's Reply", m, m)
		}
	case <-time.After(waitFor):
		return errors.New("the api's answer never reached the stream actor")
	}
	c, err := transporttest.Dial(sys.Address(), transporttest.WithCert(gwKP))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Send(transporttest.Batch(stream, &messages.LogsBatch{Stream: "s", Seq: 1}, nil), acceptWait); err != nil {
		return fmt.Errorf("a gateway's LogsBatch to the stream actor: %w", err)
	}
	select {
	case m := <-got:
		if b, ok := m.(*messages.LogsBatch); !ok || b.Seq != 1 {
			return fmt.Errorf("the stream actor received %T %v, want the batch", m, m)
		}
	case <-time.After(waitFor):
		return errors.New("the batch never reached the stream actor")
	}
	before := refused.Total()
	for _, tc := range []struct {
		id  string
		msg proto.Message
	}{
		{transport.ClientStreamPrefix + "00ff/x", &messages.LogsBatch{}},
		{transport.ClientStreamPrefix, &messages.LogsBatch{}},
		{transport.ClientStreamPrefix + "00FF", &messages.LogsBatch{}},
		{transport.SupervisorSession, &messages.LogsBatch{}},
		{transport.ClientStreamPrefix + "00ff", &messages.LogsRequest{Name: "a"}},
		{transport.ClientStreamPrefix + "00ff", &actor.Stop{}},
	} {
		c, err := transporttest.Dial(sys.Address(), transporttest.WithCert(gwKP))
		if err != nil {
			return err
		}
		err = c.Send(transporttest.Batch(actor.NewPID(sys.Address(), tc.id), tc.msg, nil), acceptWait)
		_ = c.Close()
		if !transporttest.Refused(err) {
			return fmt.Errorf("a gateway's %T to %s at the client: %v, want refused", tc.msg, tc.id, err)
		}
	}
	deadline := time.Now().Add(waitFor)
	for refused.Total()-before != 6 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the client's endpoint counted %d refusals, want 6", refused.Total()-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(got) != 0 {
		return fmt.Errorf("the stream actor received %v after the refusals", <-got)
	}
	return nil
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
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: remote error: tls: bad certificate"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: EOF"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "error reading server preface: connection reset by peer"`), true},
		{status.Error(codes.Unavailable, "write tcp 127.0.0.1:40614->127.0.0.1:33393: write: broken pipe"), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), false},
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
	err := c.Send(transporttest.Batch(actor.NewPID("127.0.0.1:1", transport.APIActor), &messages.ListRequest{}, nil), acceptWait)
	if err == nil || transporttest.Refused(err) {
		t.Fatalf("Send to a closed port = %v, want a non-refusal error", err)
	}
}
