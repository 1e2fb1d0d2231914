// Package access decides what a client may do at a gateway: the roles a
// client certificate is issued with (admin, operator, viewer), the
// sandboxes an operator may drive, and the table of operations each role is
// allowed. It is pure logic over strings: the gateway feeds it the client
// records it keeps (what `client issue` recorded for each certificate) and
// the caller's identity the transport authenticated.
//
// The table:
//
//	                     viewer  operator              admin
//	Read (get, list,      yes     yes                   yes
//	  logs, policy get)
//	Create                no      yes                   yes
//	Change (start, stop,  no      its own and granted   yes
//	  recover, delete,
//	  policy set)
//	Run (exec, connect,   no      its own and granted   yes
//	  ssh-proxy, cp, ...)
//	Faults (chaos)        no      no                    yes
//	Clients (issue,       no      no                    yes
//	  revoke, list)
//
// An operator's own sandboxes are those whose record names it as their
// creator; granted ones are named when it is issued (--sandbox). Run is
// apart from Read on purpose: exec and connect run code inside the
// sandbox, with its workspace and its egress, so a viewer has neither.
//
// Some settings lift what protects the host from a sandbox, and only an
// admin may ask for them (AdminOnlyError): no limit (-1 or none) for any
// of a sandbox's limits, a limit above the gateway's default, and a
// policy that turns stockade.allow_ptrace on. The gateway names them; this
// package words the refusal.
package access

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a client certificate was issued to do.
type Role string

// The roles, least to most.
const (
	Viewer   Role = "viewer"
	Operator Role = "operator"
	Admin    Role = "admin"
)

// Roles lists the roles, least to most.
func Roles() []Role { return []Role{Viewer, Operator, Admin} }

// rank orders the roles (0: not a role).
func (r Role) rank() int { return slices.Index(Roles(), r) + 1 }

// ParseRole parses a role name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", fmt.Errorf("role %q: use admin, operator or viewer", s)
}

// Op is the kind of a client's request.
type Op int

// The kinds of requests (the package comment has the table).
const (
	Read    Op = iota + 1 // get, list, logs, policy get
	Create                // sandbox create
	Change                // start, stop, recover, delete, policy set
	Run                   // exec, connect, ssh-proxy, cp, port-forward: code in the sandbox
	Faults                // arm a fault (the chaos seam)
	Clients               // client issue, revoke, list
)

// String names the kind.
func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Create:
		return "create"
	case Change:
		return "change"
	case Run:
		return "run"
	case Faults:
		return "faults"
	case Clients:
		return "clients"
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// may reports what role r may do of kind o: all of it, only on its own
// and granted sandboxes (own), or nothing.
func (r Role) may(o Op) (all, own bool) {
	switch r {
	case Admin:
		return o >= Read && o <= Clients, false
	case Operator:
		switch o {
		case Read, Create:
			return true, false
		case Change, Run:
			return false, true
		}
	case Viewer:
		return o == Read, false
	}
	return false, false
}

// Grant is what one client may do: its role and, for an operator, the
// sandboxes granted at issue besides the ones it creates.
type Grant struct {
	Role      Role
	Sandboxes []string
	// Note says why the grant is not simply what was recorded (records
	// from before roles; records that disagree); empty otherwise.
	Note string
	// Mixed: the client's live certificates were recorded with different
	// roles or sandboxes.
	Mixed bool
}

// Request is what a client asks, as the check needs it.
type Request struct {
	Op Op
	// Action names the request in a refusal ("delete", "exec",
	// "client issue").
	Action string
	// Sandbox is the sandbox it is about; empty for a request about none.
	Sandbox string
	// CreatedBy is the identity of the sandbox's creator ("client:alice");
	// empty when its record names none (created before roles were
	// recorded: nobody's own).
	CreatedBy string
}

// DeniedError is a refusal: who asked, with which role, and what would
// work instead.
type DeniedError struct {
	Client string // the caller's identity, e.g. "client:bob"
	Role   Role
	Req    Request
	// Why: the role never may (empty), or the sandbox is not its own.
	NotOwn bool
}

func (e *DeniedError) Error() string {
	what := e.Req.Action
	if e.Req.Sandbox != "" {
		what += " sandbox " + e.Req.Sandbox
	}
	msg := fmt.Sprintf("%s is a%s %s client and may not %s: ", e.Client, article(e.Role), e.Role, what)
	if e.NotOwn {
		creator := e.Req.CreatedBy
		if creator == "" {
			creator = "no recorded client"
		}
		name := strings.TrimPrefix(e.Client, "client:")
		return msg + fmt.Sprintf("an operator drives only the sandboxes it created and those granted to it at issue, and %s was created by %s; an admin client can, or an admin can grant it (stockade client revoke %s, then stockade client issue %s --role operator --sandbox %s ... --reuse-name)",
			e.Req.Sandbox, creator, name, name, e.Req.Sandbox)
	}
	switch e.Req.Op {
	case Read, Create, Change, Run:
		allowed := "only read (sandbox get, list, logs, policy get)"
		if e.Role == Operator {
			allowed = "read, create, and drive its own sandboxes"
		}
		return msg + fmt.Sprintf("a %s may %s; %s needs %s client", e.Role, allowed, what, needs(e.Req.Op))
	default:
		return msg + fmt.Sprintf("%s needs an admin client", what)
	}
}

// needs names the least role that may do o (on its own sandbox).
func needs(o Op) string {
	if o == Read {
		return "a viewer"
	}
	if _, own := Operator.may(o); own || o == Create {
		return "an operator (on a sandbox it created or was granted) or an admin"
	}
	return "an admin"
}

func article(r Role) string {
	if strings.HasPrefix(string(r), "a") || strings.HasPrefix(string(r), "o") {
		return "n"
	}
	return ""
}

// CheckRole reports whether g's role may make request r on some sandbox:
// the gateway's check before it knows the sandbox's creator (its sandbox
// actor then makes the full Check). nil, or a *DeniedError.
func (g Grant) CheckRole(client string, r Request) error {
	if all, own := g.Role.may(r.Op); all || own {
		return nil
	}
	return &DeniedError{Client: client, Role: g.Role, Req: r}
}

// Check reports whether client (its identity, "client:NAME"), holding g,
// may make request r (for an operator's own-sandbox kinds, on r.Sandbox
// created by r.CreatedBy): nil, or a *DeniedError naming what would work.
func (g Grant) Check(client string, r Request) error {
	all, own := g.Role.may(r.Op)
	switch {
	case all:
		return nil
	case !own:
		return &DeniedError{Client: client, Role: g.Role, Req: r}
	case r.Sandbox != "" && (r.CreatedBy == client || slices.Contains(g.Sandboxes, r.Sandbox)):
		return nil
	}
	return &DeniedError{Client: client, Role: g.Role, Req: r, NotOwn: true}
}

// AdminOnlyError refuses a client that is not an admin a setting only an
// admin may ask for (the package comment lists them).
type AdminOnlyError struct {
	Client string // the caller's identity, e.g. "client:bob"
	Role   Role
	// Action names the request, e.g. "create sandbox web".
	Action string
	// Asks are the refused settings, each with why, e.g. "--memory none
	// (no memory limit)".
	Asks []string
	// Instead says what works.
	Instead string
}

func (e *AdminOnlyError) Error() string {
	return fmt.Sprintf("%s is a%s %s client and may not %s with %s: only an admin client may lift or raise a sandbox's limits or allow ptrace; %s",
		e.Client, article(e.Role), e.Role, e.Action, strings.Join(e.Asks, ", "), e.Instead)
}

// CheckAdminOnly reports whether client, holding g, may make action with
// the admin-only settings asks: nil when it asks none or g is an admin's,
// else an *AdminOnlyError saying instead what works.
func (g Grant) CheckAdminOnly(client, action string, asks []string, instead string) error {
	if len(asks) == 0 || g.Role == Admin {
		return nil
	}
	return &AdminOnlyError{Client: client, Role: g.Role, Action: action, Asks: asks, Instead: instead}
}

// LocalAdmin is the name of the client whose configuration `gateway run`
// writes into its state dir: the local operator, an admin.
const LocalAdmin = "admin"

// Issued is what was recorded for one of a client's live certificates
// (not revoked, not expired): read from a store, so untrusted input.
type Issued struct {
	// Role as recorded; empty for a certificate issued before roles.
	Role      string
	Sandboxes []string
}

// Resolve is what client name may do, from the records of its live
// certificates. A record without a role (issued before roles) counts as
// admin for the local admin (LocalAdmin) and as viewer for every other
// name; a role this build does not know counts as viewer. When the
// records disagree (they should not: issue refuses a second role for a
// live name), the least role wins, with the sandboxes every record at
// that role grants. No live certificate: an error (nothing is allowed).
func Resolve(name string, live []Issued) (Grant, error) {
	if len(live) == 0 {
		return Grant{}, fmt.Errorf("client %s has no live certificate recorded at this gateway (revoked, expired, or never issued here)", name)
	}
	var g Grant
	var notes []string
	for i, rec := range live {
		r, err := ParseRole(rec.Role)
		switch {
		case rec.Role == "" && name == LocalAdmin:
			r = Admin
		case rec.Role == "":
			r = Viewer
			notes = append(notes, "issued before roles: a viewer until issued again with --role")
		case err != nil:
			r = Viewer
			notes = append(notes, fmt.Sprintf("recorded role %q is unknown here: a viewer", rec.Role))
		}
		var sandboxes []string
		if r == Operator {
			sandboxes = slices.Clone(rec.Sandboxes)
			slices.Sort(sandboxes)
			sandboxes = slices.Compact(sandboxes)
		}
		switch {
		case i == 0:
			g.Role, g.Sandboxes = r, sandboxes
			continue
		case r != g.Role || !slices.Equal(sandboxes, g.Sandboxes):
			g.Mixed = true
		}
		switch {
		case r.rank() < g.Role.rank():
			g.Role, g.Sandboxes = r, sandboxes
		case r == g.Role:
			g.Sandboxes = slices.DeleteFunc(g.Sandboxes, func(s string) bool { return !slices.Contains(sandboxes, s) })
		}
	}
	if g.Mixed {
		notes = append(notes, "its certificates' records disagree: the least role and the sandboxes all of them grant")
	}
	slices.Sort(notes)
	g.Note = strings.Join(slices.Compact(notes), "; ")
	return g, nil
}

// SameGrant reports whether a new certificate for a live client, with
// role and sandboxes, keeps what the client may do (a renewal): a live
// name has one role and one set of sandboxes.
func SameGrant(g Grant, role Role, sandboxes []string) bool {
	want := slices.Clone(sandboxes)
	slices.Sort(want)
	return !g.Mixed && g.Role == role && slices.Equal(g.Sandboxes, slices.Compact(want))
}
