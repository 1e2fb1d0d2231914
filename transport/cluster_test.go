package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

var (
	// node1 is the identity of this process's gateway endpoint (the owner
	// of the sandboxes in the cluster tests).
	node1 = trust.Identity{Role: trust.RoleGateway, Name: "node1"}
	// node3 is a gateway node the tests play with the attacker's kit.
	node3 = trust.Identity{Role: trust.RoleGateway, Name: "node3"}
)

// callerAddr is the address of a forwarded message's original caller in
// the tests that play the forwarding node: another host than the
// forwarding connection's (127.0.0.1), so that a test can tell them apart.
const callerAddr = "127.0.0.2:1"

// withHeader sets the header of b's envelopes and returns b.
func withHeader(b *remote.MessageBatch, h map[string]string) *remote.MessageBatch {
	for _, e := range b.Envelopes {
		e.MessageHeader = &remote.MessageHeader{HeaderData: h}
	}
	return b
}

// forwardedBy is the header a forwarding node sends for caller at addr.
func forwardedBy(caller trust.Identity, addr string) map[string]string {
	return map[string]string{transport.PeerHeader: caller.String(), transport.PeerAddrHeader: addr}
}

// TestForwardedByGateway: a gateway node forwards a client's request and a
// supervisor's Hello with the identity it stamped on receipt: the actor
// sees the original caller (Peer, PeerHost) and the forwarding node
// (Forwarded), whatever ViaHeader the node sent; the caller's reply
// address on the caller's host is admitted. A node that sends no
// PeerHeader speaks for itself.
func TestForwardedByGateway(t *testing.T) {
	g := useGateway(t)
	total := g.refused.Total()
	node := g.as(t, node3)
	callerHost := strings.Split(callerAddr, ":")[0]
	for _, tc := range []struct {
		name   string
		target string
		msg    proto.Message
		caller trust.Identity
	}{
		{"client_request", transport.APIActor, &messages.ListRequest{}, alice},
		{"supervisor_hello", transport.HelloActor, &messages.Hello{Sandbox: "a", Instance: "i1"}, supA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range g.actors {
				r.reset()
			}
			h := forwardedBy(tc.caller, callerAddr)
			h[transport.ViaHeader] = "gateway:evil"
			h["x-forged"] = "1"
			reply := actor.NewPID(callerAddr, "future$7")
			if err := node.Send(withHeader(transporttest.Batch(g.pid(tc.target), tc.msg, reply), h), acceptWait); err != nil {
				t.Fatalf("forwarded %T refused: %v", tc.msg, err)
			}
			eventually(t, func() bool { return len(g.recorded(tc.target)) == 1 }, "%s never received the forwarded message", tc.target)
			r := g.recorded(tc.target)[0]
			if got, ok := r.msg.(proto.Message); !ok || !proto.Equal(got, tc.msg) {
				t.Fatalf("%s received %v, want %v", tc.target, r.msg, tc.msg)
			}
			if !r.remote || r.peer != tc.caller || r.host != callerHost {
				t.Errorf("Peer = %v (remote %v), PeerHost = %q; want %s from %s", r.peer, r.remote, r.host, tc.caller, callerHost)
			}
			if !r.fwd || r.via != node3 {
				t.Errorf("Forwarded = %v, %v; want %s, true", r.via, r.fwd, node3)
			}
			want := map[string]string{transport.PeerHeader: tc.caller.String(), transport.PeerAddrHeader: callerAddr, transport.ViaHeader: node3.String()}
			if !equalMaps(r.header, want) {
				t.Errorf("header %v, want %v", r.header, want)
			}
			if r.sender == nil || r.sender.Address != reply.Address || r.sender.Id != reply.Id {
				t.Errorf("sender %v, want %v (the caller's reply address)", r.sender, reply)
			}
		})
	}
	t.Run("relayed_by_the_node", func(t *testing.T) {
		for _, r := range g.actors {
			r.reset()
		}
		// The forwarding node asks for the answer itself (a future on its
		// own host, 127.0.0.1) to relay it: accepted, still as alice's.
		reply := actor.NewPID("127.0.0.1:9", "future$8")
		if err := node.Send(withHeader(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, reply), forwardedBy(alice, callerAddr)), acceptWait); err != nil {
			t.Fatalf("relayed request refused: %v", err)
		}
		eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the relayed request")
		r := g.recorded(transport.APIActor)[0]
		if r.peer != alice || !r.fwd || r.sender == nil || r.sender.Address != reply.Address {
			t.Fatalf("Peer %v, Forwarded %v, sender %v; want alice, forwarded, reply to %s", r.peer, r.fwd, r.sender, reply)
		}
	})
	t.Run("node_itself", func(t *testing.T) {
		for _, r := range g.actors {
			r.reset()
		}
		// PeerAddrHeader and ViaHeader without a PeerHeader: the node
		// speaks for itself; what it sent is dropped.
		h := map[string]string{transport.PeerAddrHeader: callerAddr, transport.ViaHeader: "gateway:evil"}
		if err := node.Send(withHeader(transporttest.Batch(g.pid(transport.APIActor), &messages.ListRequest{}, nil), h), acceptWait); err != nil {
			t.Fatalf("the node's own request refused: %v", err)
		}
		eventually(t, func() bool { return len(g.recorded(transport.APIActor)) == 1 }, "api never received the node's request")
		r := g.recorded(transport.APIActor)[0]
		if !r.remote || r.peer != node3 || r.host != "127.0.0.1" || r.fwd {
			t.Fatalf("Peer = %v (remote %v), PeerHost %q, Forwarded %v; want %s from 127.0.0.1, not forwarded", r.peer, r.remote, r.host, r.fwd, node3)
		}
		if len(r.header) != 2 || !strings.HasPrefix(r.header[transport.PeerAddrHeader], "127.0.0.1:") {
			t.Fatalf("header %v, want only the node's own %s and %s", r.header, transport.PeerHeader, transport.PeerAddrHeader)
		}
	})
	if n := g.refused.Total() - total; n != 0 {
		t.Fatalf("%d refusals", n)
	}
	g.serves(t, 1)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestForwardRefused: a gateway node addresses api and hello only, with a
// forwarded caller who may send that there (a client's request, a
// supervisor's Hello), well formed, and a reply address on that caller's
// host; anything else is refused and nothing is delivered.
func TestForwardRefused(t *testing.T) {
	g := useGateway(t)
	api, hello := g.pid(transport.APIActor), g.pid(transport.HelloActor)
	list := &messages.ListRequest{}
	fromAlice := forwardedBy(alice, callerAddr)
	for _, tc := range []struct {
		name   string
		batch  *remote.MessageBatch
		reason string
	}{
		{"sandboxes", withHeader(transporttest.Batch(g.pid(transport.SandboxesActor), list, nil), fromAlice), transport.ReasonTarget},
		{"sandboxes_itself", transporttest.Batch(g.pid(transport.SandboxesActor), list, nil), transport.ReasonTarget},
		{"sandbox", withHeader(transporttest.Batch(g.pid(transport.SandboxActorID("a")), list, nil), fromAlice), transport.ReasonTarget},
		{"session", withHeader(transporttest.Batch(g.pid(sessionA), &messages.Heartbeat{Sandbox: "a"}, nil),
			forwardedBy(supA, callerAddr)), transport.ReasonTarget},
		{"logs_stream", withHeader(transporttest.Batch(g.pid(logsA), &messages.LogsAck{}, nil), fromAlice), transport.ReasonTarget},
		{"future_request", transporttest.Batch(g.pid(wellFormedReply), &messages.ListRequest{}, nil), transport.ReasonMessageType},
		{"hello_to_api", withHeader(transporttest.Batch(api, &messages.Hello{Sandbox: "a"}, nil), forwardedBy(supA, callerAddr)), transport.ReasonMessageType},
		{"stop", withHeader(transporttest.Stop(api), fromAlice), transport.ReasonSystemMessage},
		{"caller_gateway", withHeader(transporttest.Batch(api, list, nil), forwardedBy(trust.Identity{Role: trust.RoleGateway, Name: "x"}, callerAddr)), transport.ReasonMalformed},
		{"caller_garbage", withHeader(transporttest.Batch(api, list, nil), map[string]string{
			transport.PeerHeader: "root", transport.PeerAddrHeader: callerAddr}), transport.ReasonMalformed},
		{"caller_bad_name", withHeader(transporttest.Batch(api, list, nil), map[string]string{
			transport.PeerHeader: "client:a/b", transport.PeerAddrHeader: callerAddr}), transport.ReasonMalformed},
		{"caller_no_addr", withHeader(transporttest.Batch(api, list, nil), map[string]string{
			transport.PeerHeader: alice.String()}), transport.ReasonMalformed},
		{"caller_addr_no_host", withHeader(transporttest.Batch(api, list, nil), forwardedBy(alice, ":4242")), transport.ReasonMalformed},
		{"caller_addr_no_port", withHeader(transporttest.Batch(api, list, nil), forwardedBy(alice, "127.0.0.2")), transport.ReasonMalformed},
		// The forwarded caller's own rights: a supervisor does not send
		// client requests, a client does not say Hello.
		{"supervisor_request", withHeader(transporttest.Batch(api, list, nil), forwardedBy(supA, callerAddr)), transport.ReasonTarget},
		{"client_hello", withHeader(transporttest.Batch(hello, &messages.Hello{Sandbox: "a"}, nil), fromAlice), transport.ReasonTarget},
		// Reply addresses: the forwarded caller's host or the forwarding
		// node's (it relays the answer), never another host, never this
		// endpoint's own address; the node's own on its own host.
		{"sender_neither_callers_nor_nodes_host", withHeader(transporttest.Batch(api, list, actor.NewPID("127.0.0.3:1", "future$1")), fromAlice), transport.ReasonSender},
		{"sender_own_address", withHeader(transporttest.Batch(api, list, g.pid(transport.SandboxesActor)),
			forwardedBy(alice, "127.0.0.1:1")), transport.ReasonSender},
		{"sender_local", withHeader(transporttest.Batch(api, list, actor.NewPID("nonhost", transport.SandboxesActor)), fromAlice), transport.ReasonSender},
		{"itself_sender_other_host", transporttest.Batch(api, list, actor.NewPID(callerAddr, "future$1")), transport.ReasonSender},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range g.actors {
				r.reset()
			}
			before := g.refused.Get(tc.reason)
			total := g.refused.Total()
			err := g.as(t, node3).Send(tc.batch, acceptWait)
			g.wantRefused(t, err, codes.PermissionDenied, tc.reason, before)
			if d := g.refused.Total() - total; d != 1 {
				t.Errorf("%d refusals counted, want 1", d)
			}
			g.nothingDelivered(t)
		})
	}
	g.serves(t, 0)
}

// TestForgedForwardHeaders: a client or a supervisor cannot claim to be
// forwarding: whatever PeerHeader, PeerAddrHeader and ViaHeader it sends
// are dropped; the actor sees its real identity and connection, not
// forwarded; and its reply address must still be on its own host.
func TestForgedForwardHeaders(t *testing.T) {
	g := useGateway(t)
	for _, tc := range []struct {
		name   string
		peer   trust.Identity
		target string
		msg    proto.Message
		claim  string
	}{
		{"client_as_gateway", mallory, transport.APIActor, &messages.ListRequest{}, "gateway:x"},
		{"client_as_client", mallory, transport.APIActor, &messages.ListRequest{}, alice.String()},
		{"supervisor_as_gateway", supA, transport.HelloActor, &messages.Hello{Sandbox: "a"}, "gateway:x"},
		{"supervisor_as_other", supA, transport.HelloActor, &messages.Hello{Sandbox: "a"}, "supervisor:b"},
		{"supervisor_as_client", supA, transport.HelloActor, &messages.Hello{Sandbox: "a"}, alice.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range g.actors {
				r.reset()
			}
			total := g.refused.Total()
			h := map[string]string{transport.PeerHeader: tc.claim, transport.PeerAddrHeader: "10.9.9.9:1", transport.ViaHeader: "gateway:node9"}
			conn := g.as(t, tc.peer)
			if err := conn.Send(withHeader(transporttest.Batch(g.pid(tc.target), tc.msg, nil), h), acceptWait); err != nil {
				t.Fatalf("%T with forged headers: %v", tc.msg, err)
			}
			eventually(t, func() bool { return len(g.recorded(tc.target)) == 1 }, "%s never received the message", tc.target)
			r := g.recorded(tc.target)[0]
			if !r.remote || r.peer != tc.peer || r.host != "127.0.0.1" {
				t.Errorf("Peer = %v (remote %v), PeerHost %q; want %s from 127.0.0.1", r.peer, r.remote, r.host, tc.peer)
			}
			if r.fwd {
				t.Errorf("Forwarded = %v, true; want not forwarded", r.via)
			}
			if len(r.header) != 2 || r.header[transport.PeerHeader] != tc.peer.String() || !strings.HasPrefix(r.header[transport.PeerAddrHeader], "127.0.0.1:") {
				t.Errorf("header %v, want only %s: %s and %s: 127.0.0.1:PORT", r.header, transport.PeerHeader, tc.peer, transport.PeerAddrHeader)
			}
			if n := g.refused.Total() - total; n != 0 {
				t.Errorf("%d refusals", n)
			}
			// The forged caller's host does not make its reply address
			// acceptable.
			before := g.refused.Get(transport.ReasonSender)
			err := conn.Send(withHeader(transporttest.Batch(g.pid(tc.target), tc.msg, actor.NewPID("10.9.9.9:1", "future$1")), h), acceptWait)
			g.wantRefused(t, err, codes.PermissionDenied, transport.ReasonSender, before)
			if n := len(g.recorded(tc.target)); n != 1 {
				t.Errorf("%s received %d messages, want only the first", tc.target, n)
			}
		})
	}
	for _, r := range g.actors {
		r.reset()
	}
	g.serves(t, 0)
}

// Environment of the cluster tests' child processes: the mode (forwarder,
// client, single) and the directory of their key material.
const (
	clusterModeEnv = "STOCKADE_TRANSPORT_TEST_CLUSTER_MODE"
	clusterDirEnv  = "STOCKADE_TRANSPORT_TEST_CLUSTER_DIR"
)

// TestGatewayRulesRefuseGateway: a single node's table (GatewayRules) has
// no route for another gateway node; it is refused, forwarding or not. The
// endpoint runs in a child process (singleNodeChild: one endpoint per
// process, see gateway).
func TestGatewayRulesRefuseGateway(t *testing.T) {
	g := useGateway(t)
	dir := t.TempDir()
	writeKeys(t, g.ca, dir, node1, node2, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := clusterCmd(ctx, "single", dir, "").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "single ok") {
		t.Fatalf("single node: %v\n%s", err, out)
	}
}

// TestForwardRoundTrip: real endpoints. A client (child process, alice)
// asks a forwarding node (child process, node2, ClusterRules) whose api
// actor forwards with transport.Forward to this process's node1; node1's
// api sees alice, from the host and connection the forwarding node saw,
// forwarded via node2, with alice's reply address, and answers alice
// directly: her future gets the Reply, and her stream actor gets it from
// node1. A message forwarded to the forwarding node is not forwarded
// again (transport.Forwarded).
func TestForwardRoundTrip(t *testing.T) {
	g := useGateway(t)
	total := g.refused.Total()
	dir := t.TempDir()
	writeKeys(t, g.ca, dir, node2, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel) // after the forwarder's cleanup (which ends it)
	fwd := startChild(t, ctx, "forwarder", dir, g.addr)
	fwdAddr := fwd.line(t, "addr ")

	out, err := clusterCmd(ctx, "client", dir, fwdAddr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "client ok") {
		t.Fatalf("client: %v\n%s\nforwarder: %s", err, out, fwd.stderr())
	}
	_, clientAddr, _ := strings.Cut(string(out), "client addr ")
	clientAddr, _, _ = strings.Cut(clientAddr, "\n")
	seen := []string{fwd.line(t, "forwarded "), fwd.line(t, "forwarded ")}

	got := g.recorded(transport.APIActor)
	if len(got) != 2 {
		t.Fatalf("api received %d messages, want 2: %+v", len(got), got)
	}
	for i, r := range got {
		_, list := r.msg.(*messages.ListRequest)
		_, logs := r.msg.(*messages.LogsRequest)
		if (i == 0 && !list) || (i == 1 && !logs) {
			t.Errorf("message %d: %T, want a ListRequest then a LogsRequest", i, r.msg)
		}
		if !r.remote || r.peer != alice || r.host != "127.0.0.1" {
			t.Errorf("message %d: Peer = %v (remote %v), PeerHost %q; want %s from 127.0.0.1", i, r.peer, r.remote, r.host, alice)
		}
		if !r.fwd || r.via != node2 {
			t.Errorf("message %d: Forwarded = %v, %v; want %s", i, r.via, r.fwd, node2)
		}
		if a := r.header[transport.PeerAddrHeader]; a != seen[i] {
			t.Errorf("message %d: %s %q, want %q (alice's connection at the forwarding node)", i, transport.PeerAddrHeader, a, seen[i])
		}
		if r.sender == nil || r.sender.Address != clientAddr {
			t.Errorf("message %d: sender %v, want alice's reply address at %s", i, r.sender, clientAddr)
		}
	}
	if !strings.HasPrefix(got[0].sender.GetId(), "reply$") || got[1].sender.GetId() != forwardStream {
		t.Errorf("senders %v, %v; want alice's future and stream actor %s", got[0].sender, got[1].sender, forwardStream)
	}

	// Forwarded once, never again: node3 forwards alice's request to
	// node2, which does not forward it to node1.
	c := dial(t, fwdAddr, transporttest.WithCert(g.cert(t, node3)))
	if err := c.Send(withHeader(transporttest.Batch(actor.NewPID(fwdAddr, transport.APIActor), &messages.ListRequest{}, nil),
		forwardedBy(alice, "127.0.0.1:9")), acceptWait); err != nil {
		t.Fatalf("node3's forwarded request to node2: %v", err)
	}
	if via := fwd.line(t, "not forwarded: via "); via != node3.String() {
		t.Errorf("node2 saw the message via %q, want %s", via, node3)
	}
	if n := len(g.recorded(transport.APIActor)); n != 2 {
		t.Errorf("api received %d messages, want 2 (the message forwarded to node2 was forwarded again)", n)
	}
	if n := g.refused.Total() - total; n != 0 {
		t.Fatalf("node1 refused %d", n)
	}
}

// forwardStream is the id of the stream actor of TestForwardRoundTrip's
// client.
const forwardStream = transport.ClientStreamPrefix + "0abc"

// writeKeys writes ca's certificate (ca.crt) and a key pair for each id
// (NAME.crt, NAME.key) in dir.
func writeKeys(t *testing.T, ca *trust.CA, dir string, ids ...trust.Identity) {
	t.Helper()
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", ca.CertPEM)
	for _, id := range ids {
		certPEM, keyPEM, _, err := ca.IssueKeyPair(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		write(id.Name+".crt", certPEM)
		write(id.Name+".key", keyPEM)
	}
}

// clusterCmd runs this test binary as a child of mode.
func clusterCmd(ctx context.Context, mode, dir, addr string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clusterModeEnv+"="+mode, clusterDirEnv+"="+dir, gatewayEnv+"="+addr)
	return cmd
}

// child is a running child process whose stdout is read line by line; it
// runs until its stdin is closed (at cleanup).
type child struct {
	lines  <-chan string
	errBuf *lockedBuffer
}

// startChild starts a child of mode; it is stopped at cleanup.
func startChild(t *testing.T, ctx context.Context, mode, dir, addr string) *child {
	t.Helper()
	cmd := clusterCmd(ctx, mode, dir, addr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{errBuf: &lockedBuffer{}}
	cmd.Stderr = c.errBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	c.lines = lines
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		// Drain: the reader ends at the child's exit.
		for range lines {
		}
		<-done
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s: %v\n%s", mode, err, c.errBuf.String())
		}
	})
	return c
}

// line returns the rest of the next line of c's stdout that starts with
// prefix, skipping others; it fails after waitFor.
func (c *child) line(t *testing.T, prefix string) string {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child exited before a line %q...\n%s", prefix, c.stderr())
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
		case <-timer.C:
			t.Fatalf("no line %q... from the child after %s\n%s", prefix, waitFor, c.stderr())
		}
	}
}

func (c *child) stderr() string { return c.errBuf.String() }

// lockedBuffer is a bytes.Buffer safe for the child's stderr copier and
// the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// clusterChild runs a cluster test's child process of mode: exit 0 and
// "MODE ok" on success.
func clusterChild(mode, dir, addr string) int {
	var err error
	switch mode {
	case "forwarder":
		err = forwarderChild(dir, addr)
	case "client":
		err = forwardClient(dir, addr)
	case "single":
		err = singleNodeChild(dir)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, mode+":", err)
		return 1
	}
	fmt.Println(mode, "ok")
	return 0
}

// childKeys reads the CA (a verifier accepting roles) and name's key pair
// from dir.
func childKeys(dir, name string, roles ...trust.Role) (*trust.Verifier, tls.Certificate, error) {
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ver, err := verifier(caPEM, roles...)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	kp, err := childKeyPair(dir, name)
	return ver, kp, err
}

func childKeyPair(dir, name string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return tls.Certificate{}, err
	}
	return trust.KeyPair(certPEM, keyPEM)
}

// forwarderChild is node2 of TestForwardRoundTrip: a cluster node whose
// api actor forwards every message to ownerAddr's api, but one forwarded
// to it. It prints "addr ADDRESS", then per message "forwarded
// PEER_ADDR" (the caller's connection it stamped) or "not forwarded: via
// NODE", and runs until its stdin is closed.
func forwarderChild(dir, ownerAddr string) error {
	ver, kp, err := childKeys(dir, node2.Name, trust.RoleClient, trust.RoleSupervisor, trust.RoleGateway)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return err
	}
	gateways, err := verifier(caPEM, trust.RoleGateway)
	if err != nil {
		return err
	}
	sys := quiet()
	rem, err := transport.Start(sys, transport.Config{Host: "127.0.0.1", Cert: kp, Verifier: ver, Dial: gateways,
		Rules: transport.ClusterRules(), Log: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	owner := actor.NewPID(ownerAddr, transport.APIActor)
	_, err = sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
			return
		}
		if via, ok := transport.Forwarded(ctx); ok {
			fmt.Println("not forwarded: via", via)
			return
		}
		var peerAddr string
		if h := ctx.MessageHeader(); h != nil {
			peerAddr = h.Get(transport.PeerAddrHeader)
		}
		transport.Forward(ctx, owner)
		fmt.Println("forwarded", peerAddr)
	}), transport.APIActor)
	if err != nil {
		return err
	}
	fmt.Println("addr", sys.Address())
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// forwardClient is alice of TestForwardRoundTrip: it prints "client addr
// ADDRESS", asks fwdAddr's api for a list (its future must get node1's
// Reply) and for logs with its stream actor as the sender (which must get
// node1's Reply, from node1).
func forwardClient(dir, fwdAddr string) error {
	ver, kp, err := childKeys(dir, alice.Name, trust.RoleGateway)
	if err != nil {
		return err
	}
	sys := quiet()
	refused := transport.NewRefusals()
	rem, err := transport.Start(sys, transport.Config{Host: "127.0.0.1", Cert: kp, Verifier: ver,
		Rules: transport.ClientRules(), Log: zerolog.Nop(), Refused: refused})
	if err != nil {
		return err
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	fmt.Println("client addr", sys.Address())
	api := actor.NewPID(fwdAddr, transport.APIActor)
	res, err := transport.Request(sys.Root, api, &messages.ListRequest{}, waitFor, transport.AnyGateway()).Result()
	if err != nil {
		return fmt.Errorf("list: %w (client refusals %d)", err, refused.Total())
	}
	if r, ok := res.(*messages.Reply); !ok || r.Message != "recorded" {
		return fmt.Errorf("list: reply %T %v, want node1's api's Reply", res, res)
	}
	type answer struct {
		msg  any
		peer trust.Identity
	}
	got := make(chan answer, 4)
	stream, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*messages.Reply); ok {
			id, _ := transport.Peer(ctx)
			got <- answer{m, id}
		}
	}), forwardStream)
	if err != nil {
		return err
	}
	sys.Root.RequestWithCustomSender(api, &messages.LogsRequest{Name: "a"}, stream)
	select {
	case a := <-got:
		if r, ok := a.msg.(*messages.Reply); !ok || r.Message != "recorded" || a.peer != node1 {
			return fmt.Errorf("the stream actor received %T %v from %s, want node1's api's Reply from %s", a.msg, a.msg, a.peer, node1)
		}
	case <-time.After(waitFor):
		return errors.New("node1's answer never reached the stream actor")
	}
	if n := refused.Total(); n != 0 {
		return fmt.Errorf("client refusals %d", n)
	}
	return nil
}

// singleNodeChild is a single gateway node (GatewayRules, node1) that a
// gateway node (node2) addresses with the attacker's kit: every batch is
// refused (no route: target), forwarded or not, and nothing is
// delivered; a client's request is served.
func singleNodeChild(dir string) error {
	ver, kp, err := childKeys(dir, node1.Name, trust.RoleClient, trust.RoleSupervisor, trust.RoleGateway)
	if err != nil {
		return err
	}
	nodeKP, err := childKeyPair(dir, node2.Name)
	if err != nil {
		return err
	}
	aliceKP, err := childKeyPair(dir, alice.Name)
	if err != nil {
		return err
	}
	sys := quiet()
	refused := transport.NewRefusals()
	rem, err := transport.Start(sys, transport.Config{Host: "127.0.0.1", Cert: kp, Verifier: ver,
		Rules: transport.GatewayRules(), Log: zerolog.Nop(), Refused: refused})
	if err != nil {
		return err
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	actors := map[string]*recorder{}
	for _, id := range []string{transport.APIActor, transport.HelloActor, transport.SandboxesActor} {
		r := &recorder{}
		if _, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return r }), id); err != nil {
			return fmt.Errorf("spawn %s: %w", id, err)
		}
		actors[id] = r
	}
	pid := func(id string) *actor.PID { return actor.NewPID(sys.Address(), id) }
	batches := []*remote.MessageBatch{
		transporttest.Batch(pid(transport.APIActor), &messages.ListRequest{}, nil),
		withHeader(transporttest.Batch(pid(transport.APIActor), &messages.ListRequest{}, nil), forwardedBy(alice, "127.0.0.1:9")),
		withHeader(transporttest.Batch(pid(transport.HelloActor), &messages.Hello{Sandbox: "a"}, nil), forwardedBy(supA, "127.0.0.1:9")),
		transporttest.Batch(pid(transport.SandboxesActor), &messages.ListRequest{}, nil),
	}
	for i, b := range batches {
		c, err := transporttest.Dial(sys.Address(), transporttest.WithCert(nodeKP))
		if err != nil {
			return err
		}
		err = c.Send(b, acceptWait)
		_ = c.Close()
		if !transporttest.Refused(err) {
			return fmt.Errorf("batch %d from %s: %v, want refused", i, node2, err)
		}
	}
	deadline := time.Now().Add(waitFor)
	for refused.Get(transport.ReasonTarget) != int64(len(batches)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d refusals (target), want %d", refused.Get(transport.ReasonTarget), len(batches))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := refused.Total(); n != int64(len(batches)) {
		return fmt.Errorf("%d refusals, want %d (target)", n, len(batches))
	}
	for id, r := range actors {
		if got := r.records(); len(got) != 0 {
			return fmt.Errorf("%s received %T after the refusals", id, got[0].msg)
		}
	}
	c, err := transporttest.Dial(sys.Address(), transporttest.WithCert(aliceKP))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Send(transporttest.Batch(pid(transport.APIActor), &messages.ListRequest{}, nil), acceptWait); err != nil {
		return fmt.Errorf("alice's ListRequest: %w", err)
	}
	deadline = time.Now().Add(waitFor)
	for len(actors[transport.APIActor].records()) != 1 {
		if time.Now().After(deadline) {
			return errors.New("api never received alice's ListRequest")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := actors[transport.APIActor].records()[0]; r.peer != alice || r.fwd {
		return fmt.Errorf("api received alice's request from %s (forwarded %v)", r.peer, r.fwd)
	}
	return nil
}
