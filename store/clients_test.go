package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestRevokeClientTransitive: revoking a client revokes every certificate
// of it and of the clients it issued, and theirs (a chain and a cycle of
// re-issues), in the file; the others and the admin are untouched; a
// second revoke finds nothing more.
func TestRevokeClientTransitive(t *testing.T) {
	ctx := context.Background()
	year := time.Now().Add(365 * 24 * time.Hour)
	s := storeWithCerts(t,
		ClientCert{Name: "admin", Serial: "a1", NotAfter: year, Role: "admin", IssuedBy: "gateway:local"},
		ClientCert{Name: "bob", Serial: "b1", NotAfter: year, Role: "admin", IssuedBy: "client:admin"},
		ClientCert{Name: "bob", Serial: "b2", NotAfter: year, Role: "admin", IssuedBy: "client:admin"},
		ClientCert{Name: "carol", Serial: "c1", NotAfter: year, Role: "admin", IssuedBy: "client:bob"},
		ClientCert{Name: "dave", Serial: "d1", NotAfter: year, Role: "viewer", IssuedBy: "client:carol"},
		ClientCert{Name: "bob", Serial: "b3", NotAfter: year, Role: "admin", IssuedBy: "client:carol"}, // a cycle
		ClientCert{Name: "erin", Serial: "e1", NotAfter: year, Role: "operator", IssuedBy: "client:admin"},
		ClientCert{Name: "old", Serial: "o1", NotAfter: year}, // before roles and issuers
	)
	revoked, err := s.RevokeClient(ctx, "bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if serials, want := serialsOf(revoked), []string{"b1", "b2", "b3", "c1", "d1"}; !slices.Equal(serials, want) {
		t.Fatalf("revoked %v, want %v", serials, want)
	}
	all, err := s.ClientCerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.Revoked.IsZero() != slices.Contains([]string{"a1", "e1", "o1"}, c.Serial) {
			t.Errorf("%s (%s): revoked %v", c.Name, c.Serial, c.Revoked)
		}
	}
	if again, err := s.RevokeClient(ctx, "bob", time.Now()); err != nil || len(again) != 0 {
		t.Fatalf("second revoke: %v %v, want nothing", again, err)
	}
}

// TestClientIndex: the in-memory view answers by name (live only) and by
// serial; a revocation stays when a later record without one arrives
// (stale or forged); a record naming no client is ignored.
func TestClientIndex(t *testing.T) {
	now := time.Now()
	x := NewClientIndex([]ClientCert{
		{Name: "bob", Serial: "b1", NotAfter: now.Add(time.Hour), Role: "viewer"},
		{Name: "bob", Serial: "b2", NotAfter: now.Add(-time.Second), Role: "viewer"}, // expired
		{Name: "bob", Serial: "b3", NotAfter: now.Add(time.Hour), Revoked: now},
		{Name: "", Serial: "zz", NotAfter: now.Add(time.Hour), Role: "admin"},
	})
	if live := x.Live("bob", now); len(live) != 1 || live[0].Serial != "b1" {
		t.Fatalf("live bob: %+v", live)
	}
	if !x.Revoked("b3") || x.Revoked("b1") || x.Revoked("nope") {
		t.Fatal("Revoked by serial is wrong")
	}
	x.Put(ClientCert{Name: "bob", Serial: "b3", NotAfter: now.Add(time.Hour), Role: "admin"})
	if !x.Revoked("b3") || len(x.Live("bob", now)) != 1 {
		t.Fatal("a record without the revocation lifted it")
	}
	if len(x.Live("", now)) != 0 || len(x.All()) != 3 {
		t.Fatalf("a nameless record was kept: %+v", x.All())
	}
	x.Put(ClientCert{Name: "bob", Serial: "b1", NotAfter: now.Add(time.Hour), Revoked: now})
	if len(x.Live("bob", now)) != 0 || !x.Revoked("b1") {
		t.Fatal("a revocation did not take")
	}
}

// TestRevokeClosureByCertificate plays F9's attacker: bob, an admin
// client, renews the local admin's name ("admin") with a key of his own,
// then is revoked. The closure follows certificates, not names: bob's
// certificates, the "admin" certificate bob issued and what was issued
// while it was live go; the local admin's certificate (issued by the
// gateway itself) and a client it issued before bob's renewal stay; a new
// bob, issued after the old one was revoked, does not inherit the old
// one's issuance tree, and the old one's does not follow the new one
// (records with issuer serials, and older records with issue times only).
func TestRevokeClosureByCertificate(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	year := time.Now().Add(365 * 24 * time.Hour)
	certs := []ClientCert{
		{Name: "admin", Serial: "a1", NotAfter: year, Role: "admin", IssuedBy: "gateway:local", Issued: at(0)},
		{Name: "alice", Serial: "al1", NotAfter: year, Role: "admin", IssuedBy: "client:admin", IssuerSerials: []string{"a1"}, Issued: at(1)},
		// The first bob, issued by alice, revoked at minute 5; he issued eve.
		{Name: "bob", Serial: "ob1", NotAfter: year, Role: "admin", IssuedBy: "client:alice", IssuerSerials: []string{"al1"}, Issued: at(2), Revoked: at(5)},
		{Name: "eve", Serial: "e1", NotAfter: year, Role: "viewer", IssuedBy: "client:bob", IssuerSerials: []string{"ob1"}, Issued: at(3)},
		// An older record (no issuer serials) bob's first certificate issued.
		{Name: "fay", Serial: "f1", NotAfter: year, Role: "viewer", IssuedBy: "client:bob", Issued: at(4)},
		// carol: the local admin's, before bob's renewal of "admin".
		{Name: "carol", Serial: "c1", NotAfter: year, Role: "operator", IssuedBy: "client:admin", IssuerSerials: []string{"a1"}, Issued: at(6)},
		// The new bob, issued by the local admin after the old one's revoke.
		{Name: "bob", Serial: "b1", NotAfter: year, Role: "admin", IssuedBy: "client:admin", IssuerSerials: []string{"a1"}, Issued: at(7)},
		// bob renews "admin" (same role: allowed) with his own key.
		{Name: "admin", Serial: "a2", NotAfter: year, Role: "admin", IssuedBy: "client:bob", IssuerSerials: []string{"b1"}, Issued: at(8)},
		// Issued while both "admin" certificates were live: either may have asked.
		{Name: "dave", Serial: "d1", NotAfter: year, Role: "operator", IssuedBy: "client:admin", IssuerSerials: []string{"a1", "a2"}, Issued: at(9)},
		// An older record of the new bob's time: issue time only.
		{Name: "gus", Serial: "g1", NotAfter: year, Role: "viewer", IssuedBy: "client:bob", Issued: at(10)},
	}
	s := storeWithCerts(t, certs...)

	// Revoking alice (the old bob's issuer): the old bob's tree (eve, and
	// fay issued while he was live), not the new bob's.
	revoked, err := s.RevokeClient(ctx, "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := serialsOf(revoked), []string{"al1", "e1", "f1"}; !slices.Equal(got, want) {
		t.Fatalf("revoke alice revoked %v, want %v (ob1 was revoked already; the new bob's tree stays)", got, want)
	}

	// Revoking bob: his certificates, the "admin" he issued and dave;
	// never the gateway's own a1, nor carol (a1's, before a2 existed).
	revoked, err = s.RevokeClient(ctx, "bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := serialsOf(revoked), []string{"a2", "b1", "d1", "g1"}; !slices.Equal(got, want) {
		t.Fatalf("revoke bob revoked %v, want %v", got, want)
	}
	all, err := s.ClientCerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if live := c.Revoked.IsZero(); live != slices.Contains([]string{"a1", "c1"}, c.Serial) {
			t.Errorf("%s (%s): revoked %v", c.Name, c.Serial, c.Revoked)
		}
	}

	// Revoking one certificate (an issue whose issuer was revoked
	// meanwhile): that one and its tree, not its name's others.
	x := []ClientCert{
		{Name: "admin", Serial: "a1", NotAfter: year, IssuedBy: "gateway:local"},
		{Name: "admin", Serial: "a3", NotAfter: year, IssuedBy: "client:zed", IssuerSerials: []string{"z1"}},
		{Name: "hal", Serial: "h1", NotAfter: year, IssuedBy: "client:admin", IssuerSerials: []string{"a3"}},
	}
	if got := RevokeClosure(x, func(c ClientCert) bool { return c.Serial == "a3" }); len(got) != 2 || !got["a3"] || !got["h1"] {
		t.Fatalf("closure of a3: %v, want a3 and h1", got)
	}
}

// TestRevokedRecordsKept: an expired record is dropped a day after its
// expiry, a revoked one is kept (it says the name was revoked, and its
// revocation passes on to what it issued).
func TestRevokedRecordsKept(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour)
	s := storeWithCerts(t,
		ClientCert{Name: "gone", Serial: "g1", NotAfter: old},
		ClientCert{Name: "bad", Serial: "r1", NotAfter: old, Revoked: old.Add(-time.Hour)},
		ClientCert{Name: "new", Serial: "n1", NotAfter: time.Now().Add(time.Hour)})
	all, err := s.ClientCerts()
	if err != nil {
		t.Fatal(err)
	}
	if serials, want := serialsOf(all), []string{"n1", "r1"}; !slices.Equal(serials, want) {
		t.Fatalf("kept %v, want %v", serials, want)
	}
}

// storeWithCerts is a store in a temporary directory holding certs.
func storeWithCerts(t *testing.T, certs ...ClientCert) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, c := range certs {
		if err := s.PutClientCert(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// serialsOf are the serials of certs, sorted.
func serialsOf(certs []ClientCert) []string {
	var out []string
	for _, c := range certs {
		out = append(out, c.Serial)
	}
	slices.Sort(out)
	return out
}
