package transport

import (
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// Well-known actor ids: the only remote targets besides futures (replies).
// They are contracts between processes (package contract).
const (
	// APIActor is the gateway's API actor: clients' requests.
	APIActor = contract.APIActor
	// HelloActor is the gateway's door for supervisors: Hello only, for the
	// sandbox the supervisor's certificate names.
	HelloActor = contract.HelloActor
	// SupervisorSession is a supervisor's session actor: the gateway's
	// commands (SetPolicy, OpenRelay, FaultRequest).
	SupervisorSession = contract.SupervisorSession
	// SandboxesActor is the gateway's sandboxes actor (never a remote target).
	SandboxesActor = contract.SandboxesActor
)

// SandboxActorID is the actor id of sandbox NAME at the gateway.
func SandboxActorID(name string) string { return contract.SandboxActorID(name) }

// GatewaySessionPrefix is the id prefix of sandbox NAME's session actors at
// the gateway (session/N children of its sandbox actor).
func GatewaySessionPrefix(name string) string { return contract.GatewaySessionPrefix(name) }

// ClientStreamPrefix starts the id of a client's stream actors: where a
// gateway sends the batches of a stream the client asked for (LogsBatch,
// or a Reply refusing it). The id is the prefix and 1 to 64 lower-case
// hex digits (client.Logs makes 32 at random).
const ClientStreamPrefix = contract.ClientStreamPrefix

// Target decides whether peer may address actor id.
type Target func(peer trust.Identity, id string) bool

// Exact is a target of one actor id.
func Exact(want string) Target { return func(_ trust.Identity, id string) bool { return id == want } }

// Futures are the reply addresses of this process's own requests that
// cross processes (NewFuture): replyPrefix and 32 lower-case hex digits.
// The endpoint delivers a reply to one only from the identity its request
// went to (guard.replyFrom).
func Futures() Target {
	return func(_ trust.Identity, id string) bool {
		rest, ok := strings.CutPrefix(id, replyPrefix)
		return ok && len(rest) == replyIDLen && lowerHex(rest)
	}
}

// lowerHex reports whether s is lower-case hex digits only.
func lowerHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ClientStreams are a client's stream actors: ClientStreamPrefix and 1
// to 64 lower-case hex digits, nothing else (no deeper path).
func ClientStreams() Target {
	return func(_ trust.Identity, id string) bool {
		rest, ok := strings.CutPrefix(id, ClientStreamPrefix)
		return ok && len(rest) > 0 && len(rest) <= 64 && lowerHex(rest)
	}
}

// OwnSessions are the gateway's session actors of the sandbox the peer's
// (supervisor) certificate names.
func OwnSessions() Target {
	return func(peer trust.Identity, id string) bool {
		p := GatewaySessionPrefix(peer.Name)
		return strings.HasPrefix(id, p) && len(id) > len(p) && !strings.Contains(id[len(p):], "/")
	}
}

// Route admits messages of Types from peers of Role to Target.
type Route struct {
	Role   trust.Role
	Target Target
	// Types are full protobuf message names, e.g. "stockade.v1.Hello".
	Types []string
}

// Rules is an endpoint's whole authorization table: what is not routed is
// refused.
type Rules []Route

// Refusal reasons (the label of stockade_remote_refused_total).
const (
	ReasonHandshake     = "handshake"      // no TLS, no or bad certificate, revoked, wrong role
	ReasonMalformed     = "malformed"      // indices out of range, unknown serializer, empty message, a bad forwarded caller
	ReasonSystemMessage = "system_message" // Stop, PoisonPill, Watch, ... from a remote peer
	ReasonTarget        = "target"         // the peer may not address this actor
	ReasonMessageType   = "message_type"   // the peer may not send this type to this actor
	ReasonSender        = "sender"         // a reply address on another host than the (original) caller's
	ReasonUnimplemented = "unimplemented"  // ListProcesses, GetProcessDiagnostics
	ReasonPanic         = "panic"          // a handler panicked; recovered
	ReasonTooLarge      = "too_large"      // over MaxMessageBytes
	ReasonReplyFrom     = "reply_from"     // a reply to a request that went to another identity (NewFuture)
)

// check returns "" when peer may send typeName to target id, else the
// refusal reason.
func (r Rules) check(peer trust.Identity, id, typeName string) string {
	if systemMessage(typeName) {
		return ReasonSystemMessage
	}
	targetOK := false
	for _, rt := range r {
		if rt.Role != peer.Role || !rt.Target(peer, id) {
			continue
		}
		targetOK = true
		for _, t := range rt.Types {
			if t == typeName {
				return ""
			}
		}
	}
	if targetOK {
		return ReasonMessageType
	}
	return ReasonTarget
}

// systemMessage: protoactor's own messages but the dead-letter reply (a
// request's target is gone; the requester's future needs to know).
func systemMessage(typeName string) bool {
	return strings.HasPrefix(typeName, "actor.") && typeName != deadLetterResponse
}

// deadLetterResponse is the type name of actor.DeadLetterResponse.
const deadLetterResponse = "actor.DeadLetterResponse"

// names returns the full protobuf names of msgs.
func names(msgs ...proto.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.ProtoReflect().Descriptor().FullName())
	}
	return out
}

// GatewayRules is a gateway node's table:
//   - a client addresses only the API actor, with client requests (a
//     logs stream's request and acknowledgements included: a stream's
//     actor at the gateway is never a remote target);
//   - the supervisor of sandbox X says Hello to the hello actor, talks to
//     X's session actors only (heartbeats, exit, boundary failure), and
//     answers the gateway's requests (SetPolicy, FaultRequest) through
//     their futures;
//   - other gateway nodes: see ClusterRules.
func GatewayRules() Rules {
	reply := names(&messages.Reply{})
	reply = append(reply, deadLetterResponse)
	return Rules{
		{Role: trust.RoleClient, Target: Exact(APIActor), Types: clientRequests()},
		{Role: trust.RoleSupervisor, Target: Exact(HelloActor), Types: names(&messages.Hello{})},
		{Role: trust.RoleSupervisor, Target: OwnSessions(), Types: names(&messages.Heartbeat{}, &messages.WorkloadExited{}, &messages.BoundaryFailed{})},
		{Role: trust.RoleSupervisor, Target: Futures(), Types: reply},
	}
}

// ClusterRules is the table of a node in a cluster of gateway nodes:
// GatewayRules, and another node (a peer of trust.RoleGateway) may address
// the API actor with the client requests and the hello actor with Hello.
// That is what a node forwards (Forward) to the node that owns the
// sandbox: the endpoint keeps the original caller's identity the
// forwarding node stamped, which must be one the rules admit for that
// actor and type (a client's request, a supervisor's Hello), and marks
// the message ViaHeader; the owner answers the caller directly, or the
// forwarding node's future when that node relays the answer (Reply to
// futures).
func ClusterRules() Rules {
	return append(GatewayRules(),
		Route{Role: trust.RoleGateway, Target: Exact(APIActor), Types: clientRequests()},
		Route{Role: trust.RoleGateway, Target: Exact(HelloActor), Types: names(&messages.Hello{})},
		// The owner's answer to a request this node relayed for a client.
		Route{Role: trust.RoleGateway, Target: Futures(), Types: append(names(&messages.Reply{}), deadLetterResponse)},
	)
}

// clientRequests are the types a client sends to the API actor.
func clientRequests() []string {
	return names(&messages.CreateRequest{}, &messages.SandboxRequest{},
		&messages.ListRequest{}, &messages.RelayRequest{}, &messages.FaultRequest{}, &messages.PolicyRequest{},
		&messages.IssueRequest{}, &messages.RevokeRequest{}, &messages.ClientListRequest{}, &messages.LogsRequest{}, &messages.LogsAck{})
}

// SupervisorRules is a supervisor's table: only a gateway node, to the
// session actor (its commands) or to the futures of the session's own
// requests (Hello, heartbeat and exit acknowledgements).
func SupervisorRules() Rules {
	acks := names(&messages.HelloAck{}, &messages.HeartbeatAck{})
	acks = append(acks, deadLetterResponse)
	return Rules{
		{Role: trust.RoleGateway, Target: Exact(SupervisorSession), Types: names(&messages.SetPolicy{}, &messages.OpenRelay{}, &messages.FaultRequest{}, &messages.Reconnect{})},
		{Role: trust.RoleGateway, Target: Futures(), Types: acks},
	}
}

// ClientRules is a client's table: only a gateway node, with the replies
// to the client's requests, and a stream's batches (or the Reply that
// refuses it) to the client's stream actors.
func ClientRules() Rules {
	return Rules{
		{Role: trust.RoleGateway, Target: Futures(), Types: append(names(&messages.Reply{}), deadLetterResponse)},
		{Role: trust.RoleGateway, Target: ClientStreams(), Types: append(names(&messages.LogsBatch{}, &messages.Reply{}), deadLetterResponse)},
	}
}
