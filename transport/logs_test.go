package transport_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
)

// TestLogsRoutes: a client asks for logs and acknowledges batches at api
// only; it cannot reach a stream's actor at the gateway (nor the sandbox
// actor that owns it), and a supervisor cannot ask for logs at all.
func TestLogsRoutes(t *testing.T) {
	g := useGateway(t)
	client := g.as(t, alice)
	for _, m := range []proto.Message{&messages.LogsRequest{Name: "a", Follow: true}, &messages.LogsAck{Name: "a", Stream: "00ff", Seq: 1}} {
		if err := client.Send(transporttest.Batch(g.pid(transport.APIActor), m, nil), acceptWait); err != nil {
			t.Fatalf("%T to api refused: %v", m, err)
		}
	}
	eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 2 }, "api never received the logs request and ack")
	for _, r := range g.recorded(transport.APIActor) {
		if !r.remote || r.peer != alice {
			t.Fatalf("api received %T from %v (remote %v)", r.msg, r.peer, r.remote)
		}
	}

	sup := g.as(t, supA)
	for _, tc := range []struct {
		name   string
		conn   *transporttest.Conn
		target string
		msg    proto.Message
		reason string
	}{
		{"client at the stream actor", client, logsA, &messages.LogsAck{Name: "a", Stream: "00ff", Seq: 9}, transport.ReasonTarget},
		{"client closes the stream directly", client, logsA, &messages.LogsAck{Name: "a", Stream: "00ff", Close: true}, transport.ReasonTarget},
		{"client stops the stream actor", client, logsA, &actor.Stop{}, transport.ReasonSystemMessage},
		{"client at the sandbox actor", client, transport.SandboxActorID("a"), &messages.LogsRequest{Name: "a"}, transport.ReasonTarget},
		{"client at sandboxes", client, transport.SandboxesActor, &messages.LogsAck{Name: "a", Stream: "00ff"}, transport.ReasonTarget},
		{"client sends a batch to api", client, transport.APIActor, &messages.LogsBatch{Stream: "00ff"}, transport.ReasonMessageType},
		{"supervisor asks api for logs", sup, transport.APIActor, &messages.LogsRequest{Name: "a"}, transport.ReasonTarget},
		{"supervisor acks at api", sup, transport.APIActor, &messages.LogsAck{Name: "a", Stream: "00ff"}, transport.ReasonTarget},
		{"supervisor at the stream actor", sup, logsA, &messages.LogsAck{Name: "a", Stream: "00ff"}, transport.ReasonTarget},
		{"supervisor sends logs to its session", sup, sessionA, &messages.LogsRequest{Name: "a"}, transport.ReasonMessageType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.refused.Get(tc.reason)
			err := tc.conn.Send(transporttest.Batch(g.pid(tc.target), tc.msg, nil), acceptWait)
			g.wantRefused(t, err, codes.PermissionDenied, tc.reason, before)
			// A refused stream is closed: dial again for the next case.
			if tc.conn == client {
				client = g.as(t, alice)
			} else {
				sup = g.as(t, supA)
			}
		})
	}
	if got := g.recorded(logsA); len(got) != 0 {
		t.Fatalf("the stream actor received %d messages, first %T", len(got), got[0].msg)
	}
	if got := g.recorded(sessionA); len(got) != 0 {
		t.Fatalf("the session actor received %d messages", len(got))
	}
	g.serves(t, 2)
}
