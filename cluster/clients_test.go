package cluster

import (
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/etcdtest"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/store"
)

// TestRevokeClientTransitiveAcrossNodes: clients issued through node a
// (their records: role, issuer) are in node b's view; revoking one through
// b revokes what it issued, transitively and by certificate (the "admin"
// certificate bob issued goes, the gateway's own stays), and node a's
// verifier (Revoked) and handlers (Clients().Live) see it; revoking one
// certificate takes that one alone.
func TestRevokeClientTransitiveAcrossNodes(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := join(t, srv, "/rv/", "a"), join(t, srv, "/rv/", "b")
	year := time.Now().Add(365 * 24 * time.Hour)
	for _, c := range []store.ClientCert{
		{Name: "admin", Serial: "a1", NotAfter: year, Role: "admin", IssuedBy: "gateway:a"},
		{Name: "bob", Serial: "b1", NotAfter: year, Role: "admin", IssuedBy: "client:admin"},
		{Name: "carol", Serial: "c1", NotAfter: year, Role: "operator", Sandboxes: []string{"x"}, IssuedBy: "client:bob"},
		{Name: "dave", Serial: "d1", NotAfter: year, Role: "viewer", IssuedBy: "client:carol"},
		{Name: "admin", Serial: "a2", NotAfter: year, Role: "admin", IssuedBy: "client:bob", IssuerSerials: []string{"b1"}},
		{Name: "erin", Serial: "e1", NotAfter: year, Role: "viewer", IssuedBy: "client:admin", IssuerSerials: []string{"a1"}},
		{Name: "erin", Serial: "e2", NotAfter: year, Role: "viewer", IssuedBy: "client:admin", IssuerSerials: []string{"a1"}},
	} {
		if err := a.PutClientCert(ctx5(t), c); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		live := b.Clients().Live("carol", time.Now())
		return len(live) == 1 && live[0].Role == "operator" && live[0].IssuedBy == "client:bob" && slices.Equal(live[0].Sandboxes, []string{"x"})
	}, "node b to see carol's record")
	revoked, err := b.RevokeClient(ctx5(t), "bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range revoked {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"admin", "bob", "carol", "dave"}) {
		t.Fatalf("revoked %v, want admin (bob's), bob, carol, dave", names)
	}
	hex := func(s string) *big.Int { n, _ := new(big.Int).SetString(s, 16); return n }
	testenv.Eventually(t, 5*time.Second, func() bool {
		return a.Revoked(hex("b1")) && a.Revoked(hex("c1")) && a.Revoked(hex("d1")) && len(a.Clients().Live("dave", time.Now())) == 0
	}, "node a to refuse bob, carol and dave")
	if a.Revoked(hex("a1")) || len(a.Clients().Live("admin", time.Now())) != 1 {
		t.Fatal("the local admin's own certificate was revoked too")
	}
	one, err := a.RevokeCert(ctx5(t), "e1", time.Now())
	if err != nil || len(one) != 1 || one[0].Serial != "e1" {
		t.Fatalf("revoking e1: %+v %v, want e1 alone", one, err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return b.Revoked(hex("e1")) }, "node b to refuse e1")
	if b.Revoked(hex("e2")) || len(b.Clients().Live("erin", time.Now())) != 1 {
		t.Fatal("revoking e1 took erin's other certificate")
	}
}
