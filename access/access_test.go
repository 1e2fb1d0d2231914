package access

import (
	"errors"
	"strings"
	"testing"
)

// TestTable: every role against every kind of request, on a sandbox the
// caller created, one granted to it, and another's: the table of the
// package comment, cell by cell, and each refusal names the role and what
// would work.
func TestTable(t *testing.T) {
	const me = "client:bob"
	own := Request{Sandbox: "mine", CreatedBy: me}
	granted := Request{Sandbox: "granted", CreatedBy: "client:alice"}
	other := Request{Sandbox: "theirs", CreatedBy: "client:alice"}
	legacy := Request{Sandbox: "old"} // created before creators were recorded
	none := Request{}
	type cell struct {
		op   Op
		on   Request
		want map[Role]bool
	}
	all := map[Role]bool{Viewer: true, Operator: true, Admin: true}
	opAdmin := map[Role]bool{Operator: true, Admin: true}
	admin := map[Role]bool{Admin: true}
	var cells []cell
	for _, on := range []Request{own, granted, other, legacy, none} {
		cells = append(cells, cell{Read, on, all}, cell{Create, on, opAdmin}, cell{Faults, on, admin}, cell{Clients, on, admin})
	}
	for _, op := range []Op{Change, Run} {
		cells = append(cells, cell{op, own, opAdmin}, cell{op, granted, opAdmin}, cell{op, other, admin}, cell{op, legacy, admin}, cell{op, none, admin})
	}
	for _, c := range cells {
		for _, role := range Roles() {
			g := Grant{Role: role, Sandboxes: []string{"granted"}}
			req := c.on
			req.Op, req.Action = c.op, "do "+c.op.String()+" to"
			err := g.Check(me, req)
			if (err == nil) != c.want[role] {
				t.Errorf("%s %s on %q (created by %q): err %v, want allowed %v", role, c.op, req.Sandbox, req.CreatedBy, err, c.want[role])
			}
			var d *DeniedError
			if err != nil && (!errors.As(err, &d) || !strings.Contains(err.Error(), me) || !strings.Contains(err.Error(), string(role))) {
				t.Errorf("%s %s: refusal %q does not name the client and its role", role, c.op, err)
			}
		}
	}
	// The role alone (the API's check before the sandbox is known): an
	// operator passes for Change and Run; a viewer does not.
	for _, op := range []Op{Change, Run} {
		if err := (Grant{Role: Operator}).CheckRole(me, Request{Op: op, Sandbox: "theirs"}); err != nil {
			t.Errorf("operator CheckRole %s: %v", op, err)
		}
		if err := (Grant{Role: Viewer}).CheckRole(me, Request{Op: op, Sandbox: "theirs"}); err == nil {
			t.Errorf("viewer CheckRole %s passed", op)
		}
	}
	if err := (Grant{Role: Operator}).CheckRole(me, Request{Op: Clients}); err == nil {
		t.Error("operator CheckRole clients passed")
	}
	// A role that is not one allows nothing.
	for _, op := range []Op{Read, Create, Change, Run, Faults, Clients} {
		if err := (Grant{Role: "root"}).Check(me, Request{Op: op, Sandbox: "mine", CreatedBy: me}); err == nil {
			t.Errorf("an unknown role may %s", op)
		}
	}
}

// TestRefusalsSayWhatWorks: the messages a user sees.
func TestRefusalsSayWhatWorks(t *testing.T) {
	for _, tc := range []struct {
		g    Grant
		req  Request
		want []string
	}{
		{Grant{Role: Viewer}, Request{Op: Change, Action: "delete", Sandbox: "x"},
			[]string{"client:bob is a viewer client and may not delete sandbox x", "only read", "an operator (on a sandbox it created or was granted) or an admin"}},
		{Grant{Role: Viewer}, Request{Op: Run, Action: "exec in", Sandbox: "x"}, []string{"may not exec in sandbox x", "an operator"}},
		{Grant{Role: Operator}, Request{Op: Change, Action: "stop", Sandbox: "x", CreatedBy: "client:alice"},
			[]string{"an operator client and may not stop sandbox x", "x was created by client:alice", "stockade client issue bob --role operator --sandbox x"}},
		{Grant{Role: Operator}, Request{Op: Clients, Action: "issue a client certificate"}, []string{"needs an admin client"}},
	} {
		err := tc.g.Check("client:bob", tc.req)
		if err == nil {
			t.Fatalf("%+v %+v allowed", tc.g, tc.req)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q lacks %q", err, w)
			}
		}
	}
}

// TestResolve: a client's grant from its live certificates' records,
// which come from a store (untrusted): no record, nothing; a record from
// before roles is a viewer, but the local admin's; an unknown role is a
// viewer; records that disagree give the least.
func TestResolve(t *testing.T) {
	if _, err := Resolve("bob", nil); err == nil {
		t.Fatal("no live certificate resolved to a grant")
	}
	for _, tc := range []struct {
		name      string
		live      []Issued
		role      Role
		sandboxes []string
		mixed     bool
		note      string
	}{
		{"bob", []Issued{{Role: "operator", Sandboxes: []string{"b", "a", "a"}}}, Operator, []string{"a", "b"}, false, ""},
		{"bob", []Issued{{Role: "viewer", Sandboxes: []string{"a"}}}, Viewer, nil, false, ""},
		{"bob", []Issued{{}}, Viewer, nil, false, "issued before roles"},
		{LocalAdmin, []Issued{{}}, Admin, nil, false, ""},
		{LocalAdmin, []Issued{{}, {Role: "admin"}}, Admin, nil, false, ""},
		{"bob", []Issued{{Role: "superuser"}}, Viewer, nil, false, `"superuser" is unknown`},
		{"bob", []Issued{{Role: "admin"}, {Role: "operator", Sandboxes: []string{"a", "b"}}, {Role: "operator", Sandboxes: []string{"b"}}}, Operator, []string{"b"}, true, "disagree"},
		{"bob", []Issued{{Role: "operator"}, {Role: "viewer"}}, Viewer, nil, true, "disagree"},
	} {
		g, err := Resolve(tc.name, tc.live)
		if err != nil {
			t.Fatal(err)
		}
		if g.Role != tc.role || strings.Join(g.Sandboxes, ",") != strings.Join(tc.sandboxes, ",") || g.Mixed != tc.mixed ||
			(tc.note == "") != (g.Note == "") || !strings.Contains(g.Note, tc.note) {
			t.Errorf("Resolve(%s, %+v) = %+v, want %s %v mixed %v note %q", tc.name, tc.live, g, tc.role, tc.sandboxes, tc.mixed, tc.note)
		}
	}
	g, _ := Resolve("bob", []Issued{{Role: "operator", Sandboxes: []string{"a", "b"}}})
	if !SameGrant(g, Operator, []string{"b", "a", "b"}) || SameGrant(g, Operator, []string{"a"}) || SameGrant(g, Admin, []string{"a", "b"}) {
		t.Error("SameGrant: a renewal must keep role and sandboxes exactly")
	}
	mixed, _ := Resolve("bob", []Issued{{Role: "operator"}, {Role: "viewer"}})
	if SameGrant(mixed, Viewer, nil) {
		t.Error("a client whose records disagree was renewed")
	}
	if _, err := ParseRole("Admin"); err == nil {
		t.Error("roles are lower case")
	}
}
