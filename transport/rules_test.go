package transport

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// TestRulesCheck is the authorization table of each endpoint kind: who may
// send what to which actor id.
func TestRulesCheck(t *testing.T) {
	t.Parallel()
	var (
		client  = trust.Identity{Role: trust.RoleClient, Name: "alice"}
		supA    = trust.Identity{Role: trust.RoleSupervisor, Name: "a"}
		gateway = trust.Identity{Role: trust.RoleGateway, Name: "node1"}
	)
	typ := func(m proto.Message) string { return names(m)[0] }
	sessA := GatewaySessionPrefix("a") + "1"
	reply := replyPrefix + "00112233445566778899aabbccddeeff" // NewFuture's form
	for _, tc := range []struct {
		table string
		rules Rules
		peer  trust.Identity
		id    string
		typ   string
		want  string
	}{
		// gateway: clients
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.ListRequest{}), ""},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.CreateRequest{}), ""},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.RevokeRequest{}), ""},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.Hello{}), ReasonMessageType},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.Reply{}), ReasonMessageType},
		{"gateway", GatewayRules(), client, APIActor, deadLetterResponse, ReasonMessageType},
		{"gateway", GatewayRules(), client, APIActor, "stockade.v1.NoSuchMessage", ReasonMessageType},
		{"gateway", GatewayRules(), client, APIActor, typ(&actor.Stop{}), ReasonSystemMessage},
		{"gateway", GatewayRules(), client, APIActor, typ(&actor.PoisonPill{}), ReasonSystemMessage},
		{"gateway", GatewayRules(), client, APIActor, typ(&actor.Watch{}), ReasonSystemMessage},
		{"gateway", GatewayRules(), client, APIActor, typ(&actor.Terminated{}), ReasonSystemMessage},
		{"gateway", GatewayRules(), client, HelloActor, typ(&messages.Hello{}), ReasonTarget},
		{"gateway", GatewayRules(), client, SandboxesActor, typ(&messages.ListRequest{}), ReasonTarget},
		{"gateway", GatewayRules(), client, sessA, typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), client, reply, typ(&messages.Reply{}), ReasonTarget},
		{"gateway", GatewayRules(), client, "api/x", typ(&messages.ListRequest{}), ReasonTarget},
		// gateway: supervisors
		{"gateway", GatewayRules(), supA, HelloActor, typ(&messages.Hello{}), ""},
		{"gateway", GatewayRules(), supA, HelloActor, typ(&messages.Heartbeat{}), ReasonMessageType},
		{"gateway", GatewayRules(), supA, sessA, typ(&messages.Heartbeat{}), ""},
		{"gateway", GatewayRules(), supA, sessA, typ(&messages.WorkloadExited{}), ""},
		{"gateway", GatewayRules(), supA, sessA, typ(&messages.BoundaryFailed{}), ""},
		{"gateway", GatewayRules(), supA, sessA, typ(&messages.Hello{}), ReasonMessageType},
		{"gateway", GatewayRules(), supA, sessA, typ(&actor.Stop{}), ReasonSystemMessage},
		{"gateway", GatewayRules(), supA, GatewaySessionPrefix("a"), typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, sessA + "/x", typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, GatewaySessionPrefix("b") + "1", typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, GatewaySessionPrefix("ab") + "1", typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, SandboxActorID("a"), typ(&messages.Heartbeat{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, APIActor, typ(&messages.ListRequest{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, reply, typ(&messages.Reply{}), ""},
		{"gateway", GatewayRules(), supA, reply, deadLetterResponse, ""},
		{"gateway", GatewayRules(), supA, reply, typ(&messages.HelloAck{}), ReasonMessageType},
		{"gateway", GatewayRules(), supA, "x" + reply, typ(&messages.Reply{}), ReasonTarget},
		// protoactor's own futures (a counter) take no reply from a peer
		{"gateway", GatewayRules(), supA, "future$7", typ(&messages.Reply{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, reply[:len(reply)-1], typ(&messages.Reply{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, reply + "0", typ(&messages.Reply{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, strings.ToUpper(reply), typ(&messages.Reply{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, reply + "/x", typ(&messages.Reply{}), ReasonTarget},
		{"supervisor", SupervisorRules(), gateway, "future$2", typ(&messages.HelloAck{}), ReasonTarget},
		{"client", ClientRules(), gateway, "future$3", typ(&messages.Reply{}), ReasonTarget},
		// gateway: other gateway nodes (no routes yet)
		{"gateway", GatewayRules(), gateway, APIActor, typ(&messages.ListRequest{}), ReasonTarget},
		{"gateway", GatewayRules(), gateway, reply, typ(&messages.Reply{}), ReasonTarget},
		// supervisor
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&messages.SetPolicy{}), ""},
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&messages.OpenRelay{}), ""},
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&messages.FaultRequest{}), ""},
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&messages.Heartbeat{}), ReasonMessageType},
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&actor.Stop{}), ReasonSystemMessage},
		{"supervisor", SupervisorRules(), gateway, reply, typ(&messages.HelloAck{}), ""},
		{"supervisor", SupervisorRules(), gateway, reply, typ(&messages.HeartbeatAck{}), ""},
		{"supervisor", SupervisorRules(), gateway, reply, deadLetterResponse, ""},
		{"supervisor", SupervisorRules(), gateway, reply, typ(&messages.Reply{}), ReasonMessageType},
		{"supervisor", SupervisorRules(), gateway, "session2", typ(&messages.SetPolicy{}), ReasonTarget},
		{"supervisor", SupervisorRules(), client, SupervisorSession, typ(&messages.SetPolicy{}), ReasonTarget},
		{"supervisor", SupervisorRules(), supA, SupervisorSession, typ(&messages.SetPolicy{}), ReasonTarget},
		// client
		{"client", ClientRules(), gateway, reply, typ(&messages.Reply{}), ""},
		{"client", ClientRules(), gateway, reply, deadLetterResponse, ""},
		{"client", ClientRules(), gateway, reply, typ(&messages.HelloAck{}), ReasonMessageType},
		{"client", ClientRules(), gateway, reply, typ(&actor.Terminated{}), ReasonSystemMessage},
		{"client", ClientRules(), gateway, APIActor, typ(&messages.ListRequest{}), ReasonTarget},
		{"client", ClientRules(), client, reply, typ(&messages.Reply{}), ReasonTarget},
		{"client", ClientRules(), supA, reply, typ(&messages.Reply{}), ReasonTarget},
		// client: stream actors (sandbox logs)
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0123456789abcdef", typ(&messages.LogsBatch{}), ""},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0123456789abcdef", typ(&messages.Reply{}), ""},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0f", deadLetterResponse, ""},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0f", typ(&messages.LogsRequest{}), ReasonMessageType},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0f", typ(&messages.SetPolicy{}), ReasonMessageType},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0f", typ(&actor.Stop{}), ReasonSystemMessage},
		{"client", ClientRules(), gateway, ClientStreamPrefix, typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0f/x", typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "0F", typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, ClientStreamPrefix + "../" + reply, typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, ClientStreamPrefix + strings.Repeat("a", 65), typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, "x" + ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), gateway, reply, typ(&messages.LogsBatch{}), ReasonMessageType},
		{"client", ClientRules(), gateway, SupervisorSession, typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), client, ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		{"client", ClientRules(), supA, ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		// gateway: logs requests and acknowledgements from clients to api only
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.LogsRequest{}), ""},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.LogsAck{}), ""},
		{"gateway", GatewayRules(), client, APIActor, typ(&messages.LogsBatch{}), ReasonMessageType},
		{"gateway", GatewayRules(), client, SandboxActorID("a"), typ(&messages.LogsRequest{}), ReasonTarget},
		{"gateway", GatewayRules(), client, SandboxActorID("a") + "/logs/0f", typ(&messages.LogsAck{}), ReasonTarget},
		{"gateway", GatewayRules(), client, SandboxesActor, typ(&messages.LogsAck{}), ReasonTarget},
		{"gateway", GatewayRules(), client, ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, APIActor, typ(&messages.LogsRequest{}), ReasonTarget},
		{"gateway", GatewayRules(), supA, sessA, typ(&messages.LogsRequest{}), ReasonMessageType},
		{"gateway", GatewayRules(), supA, SandboxActorID("a") + "/logs/0f", typ(&messages.LogsAck{}), ReasonTarget},
		{"gateway", GatewayRules(), gateway, APIActor, typ(&messages.LogsRequest{}), ReasonTarget},
		// supervisor: no logs messages at all
		{"supervisor", SupervisorRules(), gateway, SupervisorSession, typ(&messages.LogsBatch{}), ReasonMessageType},
		{"supervisor", SupervisorRules(), gateway, ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		// cluster: another gateway node forwards clients' requests to api
		// and supervisors' Hello to hello, nothing else
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.ListRequest{}), ""},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.CreateRequest{}), ""},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.RevokeRequest{}), ""},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.LogsRequest{}), ""},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.LogsAck{}), ""},
		{"cluster", ClusterRules(), gateway, HelloActor, typ(&messages.Hello{}), ""},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.Hello{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.Reply{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&messages.LogsBatch{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, HelloActor, typ(&messages.ListRequest{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, HelloActor, typ(&messages.Heartbeat{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, APIActor, typ(&actor.Stop{}), ReasonSystemMessage},
		{"cluster", ClusterRules(), gateway, SandboxesActor, typ(&messages.ListRequest{}), ReasonTarget},
		{"cluster", ClusterRules(), gateway, sessA, typ(&messages.Heartbeat{}), ReasonTarget},
		{"cluster", ClusterRules(), gateway, SandboxActorID("a"), typ(&messages.ListRequest{}), ReasonTarget},
		{"cluster", ClusterRules(), gateway, reply, typ(&messages.Reply{}), ""}, // the owner's answer to a relayed request
		{"cluster", ClusterRules(), gateway, reply, typ(&messages.CreateRequest{}), ReasonMessageType},
		{"cluster", ClusterRules(), gateway, "api/x", typ(&messages.ListRequest{}), ReasonTarget},
		{"cluster", ClusterRules(), gateway, ClientStreamPrefix + "0f", typ(&messages.LogsBatch{}), ReasonTarget},
		// cluster: clients and supervisors as in GatewayRules
		{"cluster", ClusterRules(), client, APIActor, typ(&messages.ListRequest{}), ""},
		{"cluster", ClusterRules(), client, HelloActor, typ(&messages.Hello{}), ReasonTarget},
		{"cluster", ClusterRules(), supA, HelloActor, typ(&messages.Hello{}), ""},
		{"cluster", ClusterRules(), supA, sessA, typ(&messages.Heartbeat{}), ""},
		{"cluster", ClusterRules(), supA, APIActor, typ(&messages.ListRequest{}), ReasonTarget},
		// empty table refuses everything
		{"none", nil, client, APIActor, typ(&messages.ListRequest{}), ReasonTarget},
	} {
		if got := tc.rules.check(tc.peer, tc.id, tc.typ); got != tc.want {
			t.Errorf("%s rules: %s -> %q %s = %q, want %q", tc.table, tc.peer, tc.id, tc.typ, got, tc.want)
		}
	}
}

// TestSystemMessage: protoactor's own types are system messages but the
// dead-letter reply; stockade's are not.
func TestSystemMessage(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]bool{
		"actor.Stop":              true,
		"actor.PoisonPill":        true,
		"actor.Watch":             true,
		"actor.Unwatch":           true,
		"actor.Terminated":        true,
		deadLetterResponse:        false,
		"stockade.v1.ListRequest": false,
		"remote.ActorPidRequest":  false,
		"actorx.Stop":             false,
	} {
		if got := systemMessage(typ); got != want {
			t.Errorf("systemMessage(%q) = %v, want %v", typ, got, want)
		}
	}
}
