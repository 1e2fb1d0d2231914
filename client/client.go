// Package client owns how a stockade client reaches a gateway: its
// configuration (gateways, CA, client certificate and key; config.go), a
// remote actor system of its own over mutual TLS (protoactor remote has no
// client-only mode: the gateway's replies come back to an endpoint the
// client listens on, on the address it uses to reach the gateway),
// requests with a deadline, and the mapping of reply statuses to the CLI's
// exit codes. Messages are the protobufs of package messages.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// DefaultGateway is the gateway's API address on the embedded default.
const DefaultGateway = contract.DefaultGateway

// ErrUnreachable wraps every failure to reach the gateway (exit code 5).
var ErrUnreachable = errors.New("gateway unreachable")

// ErrRefused wraps a gateway's refusal of this client's certificate, or a
// gateway whose certificate this configuration's CA did not sign (exit 5).
var ErrRefused = errors.New("not authenticated")

// DefaultStateDir is $XDG_STATE_HOME/stockade, else ~/.local/state/stockade.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "stockade")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "stockade")
	}
	return filepath.Join(home, ".local", "state", "stockade")
}

// Client is a connection to one gateway.
type Client struct {
	sys     *actor.ActorSystem
	rem     *transport.Endpoint
	api     *actor.PID
	addr    string
	timeout time.Duration
	tls     tlsCert
	// refused is closed, with refusedErr set, when the handshake check
	// failed: pending and later requests fail at once with its cause.
	refused    chan struct{}
	refusedErr error
}

type tlsCert struct {
	kp   tls.Certificate
	pool *x509.CertPool
}

// Reach returns the first of addrs that accepts a TCP connection; the
// error (wrapping ErrUnreachable) names every address tried.
func Reach(addrs []string) (string, error) {
	var errs []string
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, 3*time.Second)
		if err == nil {
			_ = c.Close()
			return a, nil
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("%w: no gateway answers (%s): is `stockade gateway run` running? set --gateway or STOCKADE_GATEWAY", ErrUnreachable, strings.Join(errs, "; "))
}

// Dial connects to the gateway at addr with cfg's credentials: it checks
// that the gateway accepts this client's certificate (and that the
// gateway's own certificate is from cfg's CA), then starts the client's own
// endpoint on the local address that reaches addr.
func Dial(addr string, cfg *Config, log zerolog.Logger) (*Client, error) {
	cred, err := credentials(cfg)
	if err != nil {
		return nil, err
	}
	ver := &trust.Verifier{CAs: cred.pool, Accept: trust.AcceptRoles(trust.RoleGateway)}
	host, err := transport.LocalIPFor(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	sys := transport.NewActorSystem(logx.ActorSystemOption(log))
	rem, err := transport.Start(sys, transport.Config{Host: host, Cert: cred.kp, Verifier: ver,
		Rules: transport.ClientRules(), Log: log})
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	c := &Client{sys: sys, rem: rem, api: actor.NewPID(addr, transport.APIActor), addr: addr, timeout: 30 * time.Second, tls: cred,
		refused: make(chan struct{})}
	// The handshake check runs beside the first request (it is off the
	// critical path of a command); a refusal ends that request at once.
	go func() {
		if err := probe(addr, cred.kp, ver); err != nil {
			c.refusedErr = err
			close(c.refused)
		}
	}()
	return c, nil
}

// probe makes one TLS connection and starts HTTP/2 on it: with TLS 1.3
// the gateway judges the client's certificate after the client's side of
// the handshake is done, so a refusal shows as the connection failing
// before the gateway's first HTTP/2 frame arrives. It is reported at once,
// with its cause, instead of as a request that is never answered.
func probe(addr string, kp tls.Certificate, ver *trust.Verifier) error {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: trust.ClientConfig(kp, ver)}
	conn, err := d.Dial("tcp", addr)
	var pe *trust.PeerError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%w: the gateway at %s is not one of this configuration's CA (%v): check --config and --gateway", ErrRefused, addr, err)
	case err != nil:
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	// The HTTP/2 client preface and an empty SETTINGS frame; the server
	// answers with its SETTINGS frame (9 bytes of header at least).
	if _, err = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err == nil {
		_, err = io.ReadFull(conn, make([]byte, 9))
	}
	if err != nil {
		return fmt.Errorf("%w: the gateway at %s refused this client's certificate (revoked, expired, or from another gateway's CA): %v; ask its operator for a new one (stockade client issue NAME --role ROLE --out FILE)", ErrRefused, addr, err)
	}
	return nil
}

// Addr returns the gateway's address.
func (c *Client) Addr() string { return c.addr }

// DialRelay opens a TLS connection to the gateway's relay listener with
// this client's certificate.
func (c *Client) DialRelay(addr string) (net.Conn, error) {
	ver := &trust.Verifier{CAs: c.tls.pool, Accept: trust.AcceptRoles(trust.RoleGateway)}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: trust.ClientConfig(c.tls.kp, ver)}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("relay %s: %w", addr, err)
	}
	return conn, nil
}

// Request sends msg to the API actor and waits for its Reply.
func (c *Client) Request(ctx context.Context, msg proto.Message) (*messages.Reply, error) {
	timeout := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	// A gateway that dies mid-request ends the connection: fail at once
	// instead of waiting out the timeout.
	lost := make(chan struct{})
	defer transport.OnEndpointEnded(c.sys, c.addr, func() { close(lost) })()
	f := transport.Request(c.sys.Root, c.api, msg, timeout, transport.AnyGateway())
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.Result()
		done <- result{res, err}
	}()
	var res any
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("%w: %s: no answer within %s: %v", ErrUnreachable, c.addr, timeout.Round(time.Millisecond), r.err)
		}
		res = r.res
	case <-c.refused:
		return nil, c.refusedErr
	case <-lost:
		return nil, fmt.Errorf("%w: %s: the connection to the gateway ended before it answered (did it stop or restart? the request may or may not have been carried out: check with get)", ErrUnreachable, c.addr)
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, c.addr, ctx.Err())
	}
	reply, ok := res.(*messages.Reply)
	if !ok {
		return nil, fmt.Errorf("gateway %s answered %T, want a Reply", c.addr, res)
	}
	return reply, nil
}

// Close stops the client's endpoint.
func (c *Client) Close() {
	c.rem.Shutdown(false)
	c.sys.Shutdown()
}
