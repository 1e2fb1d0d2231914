package transporttest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// unaryTimeout is the deadline of one Unary call.
const unaryTimeout = 5 * time.Second

// Conn is a raw gRPC connection to a protoactor remote endpoint.
type Conn struct {
	cc *grpc.ClientConn
}

// Dial connects to addr; conf nil means plaintext (no TLS at all). The
// handshake may fail only at first use (grpc is lazy).
func Dial(addr string, conf *tls.Config) (*Conn, error) {
	creds := insecure.NewCredentials()
	if conf != nil {
		creds = credentials.NewTLS(conf)
	}
	// passthrough: addr is used as is (no resolver), like protoactor's
	// own grpc.Dial.
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("transporttest: dial %s: %w", addr, err)
	}
	return &Conn{cc: cc}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.cc.Close() }

// Unary calls one of the Remoting service's unary methods by short name
// ("ListProcesses" or "GetProcessDiagnostics") with a 5 s deadline and
// returns the RPC error (nil if it answered).
func (c *Conn) Unary(method string) error {
	ctx, cancel := context.WithTimeout(context.Background(), unaryTimeout)
	defer cancel()
	client := remote.NewRemotingClient(c.cc)
	var err error
	switch method {
	case "ListProcesses":
		_, err = client.ListProcesses(ctx, &remote.ListProcessesRequest{Pattern: ""})
	case "GetProcessDiagnostics":
		_, err = client.GetProcessDiagnostics(ctx, &remote.GetProcessDiagnosticsRequest{Pid: actor.NewPID("nonhost", "api")})
	default:
		return fmt.Errorf("transporttest: unknown unary method %q (ListProcesses, GetProcessDiagnostics)", method)
	}
	return err
}

// Send opens a Receive stream, sends b (first a ConnectRequest with
// ServerConnection{SystemId:"attacker", Address: "127.0.0.1:1"} like
// protoactor's endpoint writer, then the batch), and returns the status
// error the server closed the stream with; nil when the stream stayed open
// for wait (the batch was accepted). An error opening the stream (failed
// handshake) is returned as is.
func (c *Conn) Send(b *remote.MessageBatch, wait time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := remote.NewRemotingClient(c.cc).Receive(ctx)
	if err != nil {
		return err
	}
	// Read until the server ends the stream (its answer) or ctx is
	// cancelled; the ConnectResponse is discarded.
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	connect := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: "attacker", Address: "127.0.0.1:1"},
		}},
	}}
	batch := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: b}}
	for _, m := range []*remote.RemoteMessage{connect, batch} {
		if err := stream.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				// The stream ended: its status is what Recv returns.
				return closed(<-done)
			}
			cancel()
			<-done
			return err
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-done:
		return closed(err)
	case <-timer.C:
		cancel()
		<-done
		return nil
	}
}

// closed maps the end of a stream to Send's result: io.EOF (the server
// ended it with OK) is no refusal.
func closed(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// Batch is one well-formed envelope of msg (proto serializer, id 0) to
// target, with sender (nil: none). It panics if msg cannot be marshalled.
func Batch(target *actor.PID, msg proto.Message, sender *actor.PID) *remote.MessageBatch {
	data, err := proto.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("transporttest: marshal %T: %v", msg, err))
	}
	env := &remote.MessageEnvelope{TypeId: 0, MessageData: data, Target: 0, SerializerId: 0}
	b := &remote.MessageBatch{
		TypeNames: []string{string(proto.MessageName(msg))},
		Targets:   []*actor.PID{target},
		Envelopes: []*remote.MessageEnvelope{env},
	}
	if sender != nil {
		b.Senders = []*actor.PID{sender}
		env.Sender = 1 // 1-based; 0 is "no sender"
	}
	return b
}

// OutOfRange is Batch with the envelope's Target index past the end of
// Targets (protoactor indexes it unchecked and panics).
func OutOfRange(target *actor.PID, msg proto.Message) *remote.MessageBatch {
	b := Batch(target, msg, nil)
	b.Envelopes[0].Target = int32(len(b.Targets))
	return b
}

// Stop is a batch carrying protoactor's Stop system message (actor.Stop)
// to target.
func Stop(target *actor.PID) *remote.MessageBatch { return Batch(target, &actor.Stop{}, nil) }

// Large is a batch whose one message carries n bytes (a
// messages.PolicyRequest with an n-byte policy).
func Large(target *actor.PID, n int) *remote.MessageBatch {
	return Batch(target, &messages.PolicyRequest{Name: "large", File: "large.yaml", Policy: make([]byte, n)}, nil)
}

// NoCertTLS is a TLS 1.3 client config presenting no certificate and not
// checking the server (an attacker's).
func NoCertTLS() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, //nolint:gosec // an attacker does not check the server
		NextProtos:         []string{"h2"},
	}
}

// WithCert returns a TLS 1.3 client config presenting kp and not checking
// the server.
func WithCert(kp tls.Certificate) *tls.Config {
	conf := NoCertTLS()
	conf.Certificates = []tls.Certificate{kp}
	return conf
}

// OtherCA returns a TLS 1.3 client config whose certificate, for id, is
// signed by a brand-new CA (not the victim's) — made with
// trust.LoadOrCreateCA in dir.
func OtherCA(dir string, id trust.Identity) (*tls.Config, error) {
	ca, _, err := trust.LoadOrCreateCA(dir)
	if err != nil {
		return nil, fmt.Errorf("transporttest: other CA: %w", err)
	}
	certPEM, keyPEM, _, err := ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		return nil, fmt.Errorf("transporttest: other CA: issue %s: %w", id, err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("transporttest: other CA: %w", err)
	}
	return WithCert(kp), nil
}

// Refused reports whether err is a server-side refusal of a stream or call
// (gRPC codes PermissionDenied, InvalidArgument, ResourceExhausted,
// Unauthenticated, Unimplemented, Internal) or a failed TLS handshake
// (codes.Unavailable with a tls/handshake/EOF/connection-reset/broken-pipe
// message: the server alerted or hung up during the handshake). A server
// that is not there (connection refused), a deadline and a cancellation are
// not refusals.
func Refused(err error) bool {
	if err == nil {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.PermissionDenied, codes.InvalidArgument, codes.ResourceExhausted,
		codes.Unauthenticated, codes.Unimplemented, codes.Internal:
		return true
	case codes.Unavailable:
		msg := strings.ToLower(st.Message())
		for _, s := range []string{"tls", "handshake", "eof", "connection reset", "broken pipe"} {
			if strings.Contains(msg, s) {
				return true
			}
		}
	}
	return false
}
