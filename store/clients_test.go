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
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	year := time.Now().Add(365 * 24 * time.Hour)
	certs := []ClientCert{
		{Name: "admin", Serial: "a1", NotAfter: year, Role: "admin", IssuedBy: "gateway:local"},
		{Name: "bob", Serial: "b1", NotAfter: year, Role: "admin", IssuedBy: "client:admin"},
		{Name: "bob", Serial: "b2", NotAfter: year, Role: "admin", IssuedBy: "client:admin"},
		{Name: "carol", Serial: "c1", NotAfter: year, Role: "admin", IssuedBy: "client:bob"},
		{Name: "dave", Serial: "d1", NotAfter: year, Role: "viewer", IssuedBy: "client:carol"},
		{Name: "bob", Serial: "b3", NotAfter: year, Role: "admin", IssuedBy: "client:carol"}, // a cycle
		{Name: "erin", Serial: "e1", NotAfter: year, Role: "operator", IssuedBy: "client:admin"},
		{Name: "old", Serial: "o1", NotAfter: year}, // before roles and issuers
	}
	for _, c := range certs {
		if err := s.PutClientCert(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	revoked, err := s.RevokeClient(ctx, "bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var serials []string
	for _, c := range revoked {
		serials = append(serials, c.Serial)
	}
	slices.Sort(serials)
	if want := []string{"b1", "b2", "b3", "c1", "d1"}; !slices.Equal(serials, want) {
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
