package sandbox

import (
	"errors"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// Clients tells what a client may do: its role and grants, from the
// gateway's records of the certificates it issued (package access). The
// gateway's PKI is the implementation; tests use a map.
type Clients interface {
	// Access returns what client name may do now, or an error when it
	// may do nothing (no live certificate recorded).
	Access(name string) (access.Grant, error)
	// GrantedTo names the clients whose live certificates grant sandbox
	// (an operator's --sandbox), sorted; none when nobody's do.
	GrantedTo(sandbox string) []string
}

// Authority checks the caller of a client request: who sent it (the
// identity the transport authenticated, or this node for a message from
// inside the process) and whether its role lets it (package access). The
// API actor checks the role alone, before it routes a request; the
// sandboxes and sandbox actors check again, the sandbox actor with the
// sandbox's creator (an operator drives its own sandboxes and the ones
// granted to it).
type Authority struct {
	// Clients are the client records (nil: no remote client may do
	// anything).
	Clients Clients
	// Self is this gateway node: the caller of a message from inside the
	// process, and who the steps it takes itself are by.
	Self trust.Identity
	Log  zerolog.Logger
	// Refusals bounds the refusal lines in Log (NewRefusalLog; one per
	// gateway, shared by its API and sandboxes actors): a client sending
	// refused requests in a loop must not grow the gateway's log without
	// bound. Nil: every refusal is logged (tests that read each line).
	Refusals *audit.DenialLimit
}

// NewRefusalLog bounds the lines logging refused client requests: at most
// transport.DefaultLogRefusals per transport.DefaultLogWindow (the bound of
// the listeners' refusal lines), then one line with the count of those left
// out.
func NewRefusalLog(log zerolog.Logger) *audit.DenialLimit {
	return audit.NewLineLimit(log, "access", "refused client requests", transport.DefaultLogRefusals, transport.DefaultLogWindow)
}

// Caller is who sent a client request, and what it may do.
type Caller struct {
	// ID is the remote peer, or Self for a message from inside the
	// process.
	ID trust.Identity
	// Grant is what the records let it do; an admin's for Self.
	Grant access.Grant
}

// String names the caller ("client:bob").
func (c Caller) String() string { return c.ID.String() }

// Admin reports whether the caller has an admin's rights (an admin client,
// or this process).
func (c Caller) Admin() bool { return c.Grant.Role == access.Admin }

// Allow reports whether the current message's caller may make req (the
// role alone when roleOnly), and returns the caller (who the request is
// by, and its grant). A refusal is logged (within Refusals' bound) and
// answered (errdefs.Refused, exit 4, naming the role and what would
// work); a message from inside this process is allowed, as an admin's.
func (au Authority) Allow(ctx actor.Context, req access.Request, roleOnly bool) (Caller, bool) {
	id, remote := transport.Peer(ctx)
	if !remote {
		return Caller{ID: au.Self, Grant: access.Grant{Role: access.Admin}}, true
	}
	if id.Role != trust.RoleClient {
		transport.Refuse(ctx, au.Log, id)
		return Caller{ID: id}, false
	}
	err := errors.New("this gateway keeps no client records")
	var g access.Grant
	if au.Clients != nil {
		g, err = au.Clients.Access(id.Name)
	}
	if err == nil && roleOnly {
		err = g.CheckRole(id.String(), req)
	} else if err == nil {
		err = g.Check(id.String(), req)
	}
	if err == nil {
		return Caller{ID: id, Grant: g}, true
	}
	au.Refuse(ctx, Caller{ID: id, Grant: g}, req, err)
	return Caller{ID: id, Grant: g}, false
}

// Refuse logs a refused client request (within Refusals' bound) and
// answers it Refused (exit 4) with err.
func (au Authority) Refuse(ctx actor.Context, c Caller, req access.Request, err error) {
	if au.Refusals == nil || au.Refusals.Allow() {
		au.Log.Warn().Str("peer", c.String()).Str("role", string(c.Grant.Role)).Str("request", req.Op.String()).
			Str("action", req.Action).Str("sandbox", req.Sandbox).Err(err).Msg("client request refused: its role does not allow it")
	}
	if ctx.Sender() != nil {
		ctx.Respond(errdefs.Reply(errdefs.Refused("%w", err)))
	}
}

// RequestOf is what a client's message asks, as package access sees it;
// false for a message that is not a client request.
func RequestOf(msg any) (access.Request, bool) {
	switch m := msg.(type) {
	case *messages.CreateRequest:
		return access.Request{Op: access.Create, Action: "create", Sandbox: m.Name}, true
	case *messages.SandboxRequest:
		if m.Verb == messages.Verb_VERB_GET {
			return access.Request{Op: access.Read, Action: "get", Sandbox: m.Name}, true
		}
		action := "use verb " + m.Verb.String() + " on"
		if v, ok := verbOf(m.Verb); ok {
			action = v.String()
		}
		return access.Request{Op: access.Change, Action: action, Sandbox: m.Name}, true
	case *messages.ListRequest:
		return access.Request{Op: access.Read, Action: "list sandboxes"}, true
	case *messages.RelayRequest:
		return access.Request{Op: access.Run, Action: "exec in or connect to (run code in)", Sandbox: m.Name}, true
	case *messages.PolicyRequest:
		if len(m.Policy) == 0 {
			return access.Request{Op: access.Read, Action: "read the policy of", Sandbox: m.Name}, true
		}
		return access.Request{Op: access.Change, Action: "set the policy of", Sandbox: m.Name}, true
	case *messages.LogsRequest:
		return access.Request{Op: access.Read, Action: "read the logs of", Sandbox: m.Name}, true
	case *messages.LogsAck:
		return access.Request{Op: access.Read, Action: "read the logs of", Sandbox: m.Name}, true
	case *messages.FaultRequest:
		if m.Name == "" {
			return access.Request{Op: access.Faults, Action: "arm a fault in the gateway"}, true
		}
		return access.Request{Op: access.Faults, Action: "arm a fault in", Sandbox: m.Name}, true
	case *messages.IssueRequest:
		return access.Request{Op: access.Clients, Action: "issue a client certificate"}, true
	case *messages.RevokeRequest:
		return access.Request{Op: access.Clients, Action: "revoke a client"}, true
	case *messages.ClientListRequest:
		return access.Request{Op: access.Clients, Action: "list clients"}, true
	}
	return access.Request{}, false
}

// authority is the Env's Authority.
func (e *Env) authority() Authority {
	self := e.Self
	if self.Name == "" {
		self = trust.Identity{Role: trust.RoleGateway, Name: "local"}
	}
	return Authority{Clients: e.Clients, Self: self, Log: e.Log, Refusals: e.Refusals}
}

// allow checks the current client request (RequestOf) fully: with this
// sandbox's creator. It returns who the request is by.
func (a *sandboxActor) allow(ctx actor.Context) (Caller, bool) {
	req, ok := RequestOf(ctx.Message())
	if !ok {
		return Caller{}, false
	}
	req.Sandbox, req.CreatedBy = a.name, a.rec.Spec.CreatedBy
	return a.env.authority().Allow(ctx, req, false)
}

// allow checks the current client request (RequestOf) of the sandboxes
// actor (create, list: about no existing sandbox) and returns who it is by.
func (a *sandboxesActor) allow(ctx actor.Context) (Caller, bool) {
	req, ok := RequestOf(ctx.Message())
	if !ok {
		return Caller{}, false
	}
	return a.env.authority().Allow(ctx, req, false)
}

// self is who this node's own steps are by ("gateway:NODE").
func (a *sandboxActor) self() string { return a.env.authority().Self.String() }

// supervisor is who the supervisor's reports are by.
func (a *sandboxActor) supervisor() string {
	return trust.Identity{Role: trust.RoleSupervisor, Name: a.name}.String()
}
