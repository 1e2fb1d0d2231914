package transporttest

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DialFrom is Dial with the connection's socket owned by local user uid
// (DialAs; the caller must be root). The handshake happens at first use.
func DialFrom(uid int, addr string, conf *tls.Config) (*Conn, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return DialAs(uid, addr) }))
	if err != nil {
		return nil, fmt.Errorf("transporttest: dial %s as uid %d: %w", addr, uid, err)
	}
	return &Conn{cc: cc}, nil
}

// Stream is a Receive stream held open, as protoactor's endpoint writer
// holds its one stream for a connection's life; it sends nothing after
// its ConnectRequest.
type Stream struct {
	cancel context.CancelFunc
	done   chan error
}

// Hold opens a Receive stream, sends a ConnectRequest (like protoactor's
// endpoint writer) and waits for the server's ConnectResponse; the
// stream then stays open until Close or until the server ends it (Done).
// An error is a failed handshake or a refused stream.
func (c *Conn) Hold() (*Stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := remote.NewRemotingClient(c.cc).Receive(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	connect := &remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{
		ConnectRequest: &remote.ConnectRequest{ConnectionType: &remote.ConnectRequest_ServerConnection{
			ServerConnection: &remote.ServerConnection{SystemId: "holder", Address: "127.0.0.1:1"},
		}},
	}}
	if err := stream.Send(connect); err != nil {
		_, rerr := stream.Recv()
		cancel()
		return nil, fmt.Errorf("transporttest: send ConnectRequest: %w (stream: %v)", err, rerr)
	}
	if _, err := stream.Recv(); err != nil {
		cancel()
		return nil, err
	}
	s := &Stream{cancel: cancel, done: make(chan error, 1)}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				s.done <- err
				return
			}
		}
	}()
	return s, nil
}

// Done receives the error the stream ended with (once).
func (s *Stream) Done() <-chan error { return s.done }

// Ended reports whether the stream ended within wait.
func (s *Stream) Ended(wait time.Duration) bool {
	select {
	case err := <-s.done:
		s.done <- err // for a later Done or Ended
		return true
	case <-time.After(wait):
		return false
	}
}

// Close ends the stream from this side.
func (s *Stream) Close() { s.cancel() }

// HoldIdle opens a TLS connection to addr with conf from a socket of
// local user uid (DialAs; uid < 0: this process's own), sends the HTTP/2
// preface and an empty SETTINGS frame, and returns the connection: an
// authenticated connection that opens no stream and reads nothing, as
// an attacker holding descriptors would. The server may close it at
// once (after the TLS handshake, which ends on the client first).
func HoldIdle(uid int, addr string, conf *tls.Config, timeout time.Duration) (net.Conn, error) {
	var raw net.Conn
	var err error
	if uid < 0 {
		raw, err = net.DialTimeout("tcp", addr, timeout)
	} else {
		raw, err = DialAs(uid, addr)
	}
	if err != nil {
		return nil, err
	}
	c := tls.Client(raw, conf)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := c.Handshake(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transporttest: TLS handshake with %s: %w", addr, err)
	}
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transporttest: HTTP/2 preface to %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// Revocations is a revocation list for a test's verifier
// (trust.Verifier.Revoked = r.Revoked); the zero value is empty.
type Revocations struct {
	mu      sync.Mutex
	serials map[string]bool
}

// Revoked reports whether serial was revoked.
func (r *Revocations) Revoked(serial *big.Int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.serials[serial.String()]
}

// Revoke revokes kp's certificate (kp.Leaf must be set: trust.KeyPair).
func (r *Revocations) Revoke(kp tls.Certificate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serials == nil {
		r.serials = map[string]bool{}
	}
	r.serials[kp.Leaf.SerialNumber.String()] = true
}
