package gateway

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/actors/sandbox/sandboxtest"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// testPKI is a gateway's PKI on a bbolt store in a temporary state dir,
// with records written before it opens (earlier versions' records).
func testPKI(t *testing.T, before ...store.ClientCert) (*pki, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, c := range before {
		if err := st.PutClientCert(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	p, err := openPKI(dir, "local", st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, st
}

// issueAs issues a client certificate through the PKI; it returns the
// certificate (nil and the error when refused).
func issueAs(t *testing.T, p *pki, name string, role access.Role, by string, sandboxes ...string) (*x509.Certificate, error) {
	t.Helper()
	key, _, err := trust.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := trust.ParseIdentity(by)
	if err != nil {
		t.Fatal(err)
	}
	_, cert, err := p.issueClient(context.Background(), issue{name: name, role: role, sandboxes: sandboxes, by: id}, key.Public())
	return cert, err
}

// TestPKIRolesAndTransitiveRevoke: what each client may do comes from its
// records (role, grants; certificates from before roles: viewers, but the
// local admin's); a live name keeps its role (a renewal keeps it, another
// role is refused); revoking a client revokes what its certificates
// issued, transitively, at the handshake (the verifier) and at every
// request (Access), while the others still work (a certificate of the same
// name issued by someone else too); an issue whose issuer was revoked
// meanwhile is revoked too.
func TestPKIRolesAndTransitiveRevoke(t *testing.T) {
	year := time.Now().Add(365 * 24 * time.Hour)
	p, st := testPKI(t,
		store.ClientCert{Name: "admin", Serial: "aa01", NotAfter: year}, // the local admin's, before roles
		store.ClientCert{Name: "old", Serial: "0d01", NotAfter: year})   // another, before roles
	if g, err := p.Access("admin"); err != nil || g.Role != access.Admin {
		t.Fatalf("the local admin from before roles: %+v %v, want admin", g, err)
	}
	if g, err := p.Access("old"); err != nil || g.Role != access.Viewer || !strings.Contains(g.Note, "before roles") {
		t.Fatalf("a client from before roles: %+v %v, want a viewer with a note", g, err)
	}
	if _, err := p.Access("nobody"); err == nil {
		t.Fatal("a client never issued has access")
	}

	bob, err := issueAs(t, p, "bob", access.Admin, "client:admin")
	if err != nil {
		t.Fatal(err)
	}
	carol, err := issueAs(t, p, "carol", access.Operator, "client:bob", "x")
	if err != nil {
		t.Fatal(err)
	}
	dave, err := issueAs(t, p, "dave", access.Viewer, "client:carol")
	if err != nil {
		t.Fatal(err)
	}
	erin, err := issueAs(t, p, "erin", access.Operator, "client:admin")
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := p.Access("carol"); g.Role != access.Operator || strings.Join(g.Sandboxes, ",") != "x" {
		t.Fatalf("carol: %+v", g)
	}
	// A renewal keeps role and sandboxes; another role or other sandboxes
	// for a live name is refused (exit 4), and nothing is recorded.
	if _, err := issueAs(t, p, "carol", access.Operator, "client:admin", "x"); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	for _, tc := range []struct {
		role      access.Role
		sandboxes []string
	}{{access.Admin, nil}, {access.Operator, []string{"x", "y"}}, {access.Viewer, nil}} {
		n := len(p.clients.All())
		if _, err := issueAs(t, p, "carol", tc.role, "client:admin", tc.sandboxes...); !errdefs.Is(err, errdefs.KindRefused) || !strings.Contains(err.Error(), "revoke it first") {
			t.Fatalf("carol as %s %v: %v, want refused", tc.role, tc.sandboxes, err)
		}
		if len(p.clients.All()) != n {
			t.Fatal("a refused issue recorded a certificate")
		}
	}
	if g, _ := p.Access("carol"); g.Role != access.Operator {
		t.Fatalf("carol after the refused issues: %+v", g)
	}

	verify := func(c *x509.Certificate) error {
		_, err := p.verifier(trust.RoleClient).Verify([]*x509.Certificate{c})
		return err
	}
	for _, c := range []*x509.Certificate{bob, carol, dave, erin} {
		if err := verify(c); err != nil {
			t.Fatalf("%s before the revoke: %v", c.Subject.CommonName, err)
		}
	}
	revoked, err := p.revoke(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	// By certificate: bob's, carol's first (bob's) and dave (issued by
	// that one); carol's renewal was the admin's, and stays.
	if len(revoked) != 3 {
		t.Fatalf("revoked %+v, want bob, carol's first certificate and dave", revoked)
	}
	for _, c := range []*x509.Certificate{bob, carol, dave} {
		if err := verify(c); err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Errorf("%s after revoking bob: %v, want revoked", c.Subject.CommonName, err)
		}
	}
	for _, name := range []string{"bob", "dave"} {
		if _, err := p.Access(name); err == nil {
			t.Errorf("%s still has access", name)
		}
	}
	if g, err := p.Access("carol"); err != nil || g.Role != access.Operator {
		t.Errorf("carol, renewed by the admin, after revoking bob: %+v %v", g, err)
	}
	if err := verify(erin); err != nil {
		t.Fatalf("erin (issued by the admin): %v", err)
	}
	if g, err := p.Access("admin"); err != nil || g.Role != access.Admin {
		t.Fatalf("the admin after revoking bob: %+v %v", g, err)
	}
	// On disk too: a restarted gateway refuses them.
	p2, err := openPKI(filepath.Dir(st.Path()), "local", st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.verifier(trust.RoleClient).Verify([]*x509.Certificate{dave}); err == nil {
		t.Fatal("dave accepted after a restart")
	}

	// An issue by a client revoked meanwhile (through another node): the
	// new certificate is revoked and the issue refused.
	ghost, err := issueAs(t, p, "ghosts-client", access.Viewer, "client:ghost")
	if !errdefs.Is(err, errdefs.KindRefused) || ghost != nil || !strings.Contains(err.Error(), "revoked meanwhile") {
		t.Fatalf("issue by a revoked issuer: %v", err)
	}
	if _, err := p.Access("ghosts-client"); err == nil {
		t.Fatal("the revoked issuer's new client has access")
	}
}

// apiWorld is the API actor on a real PKI, with a stand-in for the
// sandboxes actor that records what the API forwarded.
type apiWorld struct {
	t         *testing.T
	sys       *actor.ActorSystem
	api       *actor.PID
	p         *pki
	mu        sync.Mutex
	forwarded []string
}

func newAPIWorld(t *testing.T) *apiWorld {
	t.Helper()
	p, _ := testPKI(t)
	w := &apiWorld{t: t, sys: actor.NewActorSystem(), p: p}
	t.Cleanup(w.sys.Shutdown)
	log := zerolog.New(&testenv.Buffer{})
	boxes, err := w.sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
		if req, ok := sandbox.RequestOf(c.Message()); ok {
			w.mu.Lock()
			w.forwarded = append(w.forwarded, req.Action)
			w.mu.Unlock()
			c.Respond(&messages.Reply{Status: messages.Status_STATUS_OK})
		}
	}), "sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	w.api, err = w.sys.Root.SpawnNamed(apiProps(&apiActor{log: log, pki: p, sandboxes: boxes,
		auth: sandbox.Authority{Clients: p, Self: p.self, Log: log}}), "api")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// as sends msg to the API as peer (the transport's header) and returns
// the reply.
func (w *apiWorld) as(peer string, msg any) *messages.Reply {
	w.t.Helper()
	res, err := sandboxtest.RequestAs(w.sys, w.api, peer, msg, 5*time.Second)
	if err != nil {
		w.t.Fatalf("%s %T: %v", peer, msg, err)
	}
	return res.(*messages.Reply)
}

func (w *apiWorld) sent() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.forwarded...)
}

// TestAPIChecksRoles: the API refuses, before forwarding anything, what a
// caller's role never may (a viewer's create, stop or exec; an operator's
// or viewer's client issue, revoke and list, faults), answering Refused
// with the role and what would work, and forwards what the role may (the
// sandbox's actor then checks the creator). Issue needs a role, grants
// only for operators; only an admin issues (an operator cannot mint an
// admin); the records say who issued; list shows them.
func TestAPIChecksRoles(t *testing.T) {
	w := newAPIWorld(t)
	pub := func() []byte {
		key, _, err := trust.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	// The local admin issues (a message from inside the process is the gateway's).
	if _, err := issueAs(t, w.p, LocalClient, access.Admin, "gateway:local"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, role string }{{"vera", "viewer"}, {"otto", "operator"}} {
		if r := w.as("client:admin", &messages.IssueRequest{Name: c.name, Role: c.role, PublicKey: pub()}); r.Status != messages.Status_STATUS_OK {
			t.Fatalf("admin issues %s: %v", c.name, r)
		}
	}
	for _, bad := range []*messages.IssueRequest{
		{Name: "nor", PublicKey: pub()},
		{Name: "nor", Role: "root", PublicKey: pub()},
		{Name: "nor", Role: "viewer", Sandboxes: []string{"x"}, PublicKey: pub()},
		{Name: "nor", Role: "operator", Sandboxes: []string{"../x"}, PublicKey: pub()},
		{Name: LocalClient, Role: "operator", PublicKey: pub()},
	} {
		if r := w.as("client:admin", bad); r.Status != messages.Status_STATUS_INVALID {
			t.Errorf("issue %+v: %v, want INVALID", bad, r)
		}
	}
	refusals := []struct {
		peer string
		msg  any
		role string
	}{
		{"client:vera", &messages.CreateRequest{Name: "x"}, "viewer"},
		{"client:vera", &messages.SandboxRequest{Name: "x", Verb: messages.Verb_VERB_STOP}, "viewer"},
		{"client:vera", &messages.SandboxRequest{Name: "x", Verb: messages.Verb_VERB_DELETE}, "viewer"},
		{"client:vera", &messages.RelayRequest{Name: "x"}, "viewer"},
		{"client:vera", &messages.PolicyRequest{Name: "x", Policy: []byte("version: 1\n")}, "viewer"},
		{"client:vera", &messages.IssueRequest{Name: "mal", Role: "viewer", PublicKey: pub()}, "viewer"},
		{"client:otto", &messages.IssueRequest{Name: "mal", Role: "admin", PublicKey: pub()}, "operator"},
		{"client:otto", &messages.IssueRequest{Name: "mal", Role: "viewer", PublicKey: pub()}, "operator"},
		{"client:otto", &messages.RevokeRequest{Name: "vera"}, "operator"},
		{"client:vera", &messages.ClientListRequest{}, "viewer"},
		{"client:otto", &messages.FaultRequest{Rule: "store.write=error:1"}, "operator"},
		{"client:nobody", &messages.ListRequest{}, "no live certificate"},
	}
	for _, r := range refusals {
		reply := w.as(r.peer, r.msg)
		if reply.Status != messages.Status_STATUS_REFUSED || !strings.Contains(reply.Message, r.role) {
			t.Errorf("%s %T: %v %q, want REFUSED naming %s", r.peer, r.msg, reply.Status, reply.Message, r.role)
		}
	}
	if got := w.sent(); len(got) != 0 {
		t.Fatalf("refused requests were forwarded: %v", got)
	}
	if _, err := w.p.Access("mal"); err == nil {
		t.Fatal("a refused issue made a client")
	}
	if g, _ := w.p.Access("vera"); g.Role != access.Viewer {
		t.Fatal("an operator's revoke revoked vera")
	}
	// What the role may: forwarded.
	for _, r := range []struct {
		peer string
		msg  any
	}{
		{"client:vera", &messages.SandboxRequest{Name: "x", Verb: messages.Verb_VERB_GET}},
		{"client:vera", &messages.ListRequest{}},
		{"client:vera", &messages.LogsRequest{Name: "x"}},
		{"client:otto", &messages.CreateRequest{Name: "x"}},
		{"client:otto", &messages.SandboxRequest{Name: "x", Verb: messages.Verb_VERB_STOP}},
		{"client:otto", &messages.RelayRequest{Name: "x"}},
	} {
		if reply := w.as(r.peer, r.msg); reply.Status != messages.Status_STATUS_OK {
			t.Errorf("%s %T: %v", r.peer, r.msg, reply)
		}
	}
	if got := w.sent(); len(got) != 6 {
		t.Fatalf("forwarded %v, want 6", got)
	}
	// The admin lists them, with their issuers.
	list := w.as("client:admin", &messages.ClientListRequest{})
	byName := map[string]*messages.ClientInfo{}
	for _, c := range list.Clients {
		byName[c.Name] = c
	}
	if v := byName["vera"]; v == nil || v.Role != "viewer" || v.IssuedBy != "client:admin" || v.Serial == "" || v.NotAfterUnixMs == 0 || v.RevokedUnixMs != 0 {
		t.Fatalf("list: vera %v", v)
	}
	if a := byName[LocalClient]; a == nil || a.Role != "admin" || a.IssuedBy != "gateway:local" {
		t.Fatalf("list: admin %v", a)
	}
	// The issued certificate carries the name, and the CA signed it.
	r := w.as("client:admin", &messages.IssueRequest{Name: "olga", Role: "operator", Sandboxes: []string{"b", "a"}, PublicKey: pub()})
	block, _ := pem.Decode(r.Certificate)
	if r.Status != messages.Status_STATUS_OK || block == nil || !strings.Contains(r.Message, "operator (sandboxes a, b)") || !strings.Contains(r.Message, "issued by client:admin") {
		t.Fatalf("issue olga: %v", r)
	}
	if rev := w.as("client:admin", &messages.RevokeRequest{Name: "admin"}); rev.Status != messages.Status_STATUS_OK ||
		!strings.Contains(rev.Message, "vera (1)") || !strings.Contains(rev.Message, "olga (1)") {
		t.Fatalf("revoking the local admin (the issuer of all): %v", rev)
	}
	if reply := w.as("client:vera", &messages.ListRequest{}); reply.Status != messages.Status_STATUS_REFUSED {
		t.Fatalf("vera after her issuer's revoke: %v", reply)
	}
}

// TestClusterViewLagsTheStore: a cluster node's view of the client records
// lags etcd (its watch); a client recorded through another node a moment
// ago, not in the view yet, is looked up in the store once more instead of
// refused, and a name the store does not know either stays refused.
func TestClusterViewLagsTheStore(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, _, err := trust.LoadOrCreateCA(filepath.Join(dir, PKIDir)); err != nil { // the cluster's CA
		t.Fatal(err)
	}
	// The store stands in for etcd, an empty index for the node's view.
	p, err := openPKI(dir, "n1", st, store.NewClientIndex(nil))
	if err != nil {
		t.Fatal(err)
	}
	rec := store.ClientCert{Name: "bob", Serial: "b0b", NotAfter: time.Now().Add(time.Hour), Role: "operator", IssuedBy: "client:admin"}
	if err := st.PutClientCert(context.Background(), rec); err != nil { // through "another node"
		t.Fatal(err)
	}
	if g, err := p.Access("bob"); err != nil || g.Role != access.Operator {
		t.Fatalf("bob, recorded through another node: %+v %v, want operator", g, err)
	}
	p.lastReread = time.Time{} // the next reread is due
	if _, err := p.Access("nobody"); err == nil {
		t.Fatal("a client the store does not know has access")
	}
}

// TestRevokeNeverTakesTheLocalAdmin plays F9's attacker: bob, an admin
// client, renews the local admin's name ("admin" keeps its role, so the
// renewal is allowed) with a key of his own, and is then revoked. The
// closure follows certificates: bob's, and the "admin" certificate bob
// issued, go; the local admin's certificate (issued by the gateway into
// client.config) stays, at the handshake and at every request. An issue
// whose issuer was revoked meanwhile revokes that one new certificate,
// not the name's others.
func TestRevokeNeverTakesTheLocalAdmin(t *testing.T) {
	p, _ := testPKI(t)
	local := issueLocalAdmin(t, p)
	bob, err := issueAs(t, p, "bob", access.Admin, "client:admin")
	if err != nil {
		t.Fatal(err)
	}
	bobsAdmin, err := issueAs(t, p, LocalClient, access.Admin, "client:bob")
	if err != nil {
		t.Fatalf("bob renews the local admin's name: %v", err)
	}
	carol, err := issueAs(t, p, "carol", access.Operator, "client:bob")
	if err != nil {
		t.Fatal(err)
	}
	verify := func(c *x509.Certificate) error {
		_, err := p.verifier(trust.RoleClient).Verify([]*x509.Certificate{c})
		return err
	}
	revoked, err := p.revoke(context.Background(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range revoked {
		got = append(got, c.Name+"/"+c.IssuedBy)
	}
	slices.Sort(got)
	if want := []string{"admin/client:bob", "bob/client:admin", "carol/client:bob"}; !slices.Equal(got, want) {
		t.Fatalf("revoke bob revoked %v, want %v", got, want)
	}
	if err := verify(local); err != nil {
		t.Fatalf("the local admin's certificate after revoking bob: %v", err)
	}
	if g, err := p.Access(LocalClient); err != nil || g.Role != access.Admin {
		t.Fatalf("the local admin after revoking bob: %+v %v", g, err)
	}
	for _, c := range []*x509.Certificate{bob, bobsAdmin, carol} {
		if err := verify(c); err == nil {
			t.Errorf("%s (serial %s) still verifies", c.Subject.CommonName, c.SerialNumber.Text(16))
		}
	}

	// A renewal of "admin" by an issuer revoked meanwhile (through another
	// node; here one never recorded): refused, and only that certificate
	// is revoked.
	if c, err := issueAs(t, p, LocalClient, access.Admin, "client:ghost"); !errdefs.Is(err, errdefs.KindRefused) || c != nil {
		t.Fatalf("renewal by a revoked issuer: %v", err)
	}
	if err := verify(local); err != nil {
		t.Fatalf("the local admin's certificate after the ghost's renewal: %v", err)
	}
}

// TestRevokedNameNotReissued: sandboxes are owned by name, so a revoked
// name is not issued again without reuse (the refusal names it and the
// flag), and nothing is recorded; with reuse it is; the gateway's own
// issue of the local admin (at its start, after the admin revoked itself)
// needs none. GrantedTo names the live operators a sandbox is granted to.
func TestRevokedNameNotReissued(t *testing.T) {
	p, _ := testPKI(t)
	issueLocalAdmin(t, p)
	if _, err := issueAs(t, p, "bob", access.Operator, "client:admin", "build"); err != nil {
		t.Fatal(err)
	}
	if _, err := issueAs(t, p, "ci", access.Operator, "client:admin", "build", "test"); err != nil {
		t.Fatal(err)
	}
	if got := p.GrantedTo("build"); !slices.Equal(got, []string{"bob", "ci"}) {
		t.Fatalf("GrantedTo(build) = %v", got)
	}
	if _, err := p.revoke(context.Background(), "bob"); err != nil {
		t.Fatal(err)
	}
	if got := p.GrantedTo("build"); !slices.Equal(got, []string{"ci"}) {
		t.Fatalf("GrantedTo(build) after revoking bob = %v", got)
	}
	n := len(p.clients.All())
	_, err := issueAs(t, p, "bob", access.Operator, "client:admin")
	if !errdefs.Is(err, errdefs.KindRefused) || !strings.Contains(err.Error(), "client bob was revoked") || !strings.Contains(err.Error(), "--reuse-name") {
		t.Fatalf("issuing a revoked name again: %v, want refused naming --reuse-name", err)
	}
	if len(p.clients.All()) != n {
		t.Fatal("the refused issue recorded a certificate")
	}
	if _, err := p.Access("bob"); err == nil {
		t.Fatal("the refused issue gave bob access")
	}
	key, _, err := trust.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id := trust.Identity{Role: trust.RoleClient, Name: LocalClient}
	if _, _, err := p.issueClient(context.Background(), issue{name: "bob", role: access.Viewer, by: id, reuse: true}, key.Public()); err != nil {
		t.Fatalf("issuing a revoked name again with reuse: %v", err)
	}
	if g, err := p.Access("bob"); err != nil || g.Role != access.Viewer {
		t.Fatalf("the new bob: %+v %v", g, err)
	}
	// The local admin revoked, then issued again by the gateway.
	if _, err := p.revoke(context.Background(), LocalClient); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.issueClient(context.Background(), issue{name: LocalClient, role: access.Admin, by: p.self}, key.Public()); err != nil {
		t.Fatalf("the gateway's own issue of the local admin after its revoke: %v", err)
	}
}

// issueLocalAdmin issues the local admin's certificate as the gateway does
// at its start (by the gateway itself).
func issueLocalAdmin(t *testing.T, p *pki) *x509.Certificate {
	t.Helper()
	key, _, err := trust.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, cert, err := p.issueClient(context.Background(), issue{name: LocalClient, role: access.Admin, by: p.self}, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
