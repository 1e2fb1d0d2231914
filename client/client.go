// Package client owns how a stockade client reaches a gateway: a remote
// actor system of its own on 127.0.0.1:0 (protoactor remote has no
// client-only mode), the client token, requests with a deadline, and the
// mapping of reply statuses to the CLI's exit codes. Messages are the
// protobufs of package messages.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
)

// DefaultGateway is the gateway's API address on the embedded default.
const DefaultGateway = "127.0.0.1:7420"

// TokenFile is the client token's file name inside the state dir.
const TokenFile = "client.token"

// APIActor is the gateway's API actor id.
const APIActor = "api"

// ErrUnreachable wraps every failure to reach the gateway (exit code 5).
var ErrUnreachable = errors.New("gateway unreachable")

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

// LoadToken returns STOCKADE_TOKEN, else the token file of stateDir.
func LoadToken(stateDir string) (string, error) {
	if t := os.Getenv("STOCKADE_TOKEN"); t != "" {
		return t, nil
	}
	p := filepath.Join(stateDir, TokenFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read client token %s: %w (set STOCKADE_TOKEN or --state-dir to the gateway's)", p, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Client is a connection to one gateway.
type Client struct {
	sys     *actor.ActorSystem
	rem     *remote.Remote
	api     *actor.PID
	addr    string
	token   string
	timeout time.Duration
}

// Dial checks the gateway answers on addr and starts the client's own
// remote endpoint on 127.0.0.1:0.
func Dial(addr, token string, log zerolog.Logger) (*Client, error) {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (is `stockade gateway run` running? set --gateway or STOCKADE_GATEWAY)", ErrUnreachable, addr, err)
	}
	_ = c.Close()
	sys := actor.NewActorSystem(logx.ActorSystemOption(log))
	rem := remote.NewRemote(sys, remote.Configure("127.0.0.1", 0))
	if err := StartRemote(rem); err != nil {
		sys.Shutdown()
		return nil, err
	}
	return &Client{sys: sys, rem: rem, api: actor.NewPID(addr, APIActor), addr: addr, token: token, timeout: 30 * time.Second}, nil
}

// StartRemote starts a remote endpoint, turning protoactor's panic on a
// failed listen into an error.
func StartRemote(rem *remote.Remote) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start remote endpoint: %v", r)
		}
	}()
	rem.Start()
	return nil
}

// Token returns the token sent with each request.
func (c *Client) Token() string { return c.token }

// Request sends msg to the API actor and waits for its Reply.
func (c *Client) Request(ctx context.Context, msg proto.Message) (*messages.Reply, error) {
	timeout := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	// A gateway that dies mid-request ends the connection: fail at once
	// instead of waiting out the timeout.
	lost := make(chan struct{})
	var once sync.Once
	sub := c.sys.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*remote.EndpointTerminatedEvent); ok && e.Address == c.addr {
			once.Do(func() { close(lost) })
		}
	})
	defer c.sys.EventStream.Unsubscribe(sub)
	f := c.sys.Root.RequestFuture(c.api, msg, timeout)
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

// ExitCode maps a reply status to the CLI exit code of DESIGN.md.
func ExitCode(s messages.Status) int {
	switch s {
	case messages.Status_STATUS_OK:
		return 0
	case messages.Status_STATUS_NOT_FOUND:
		return 3
	case messages.Status_STATUS_REFUSED:
		return 4
	case messages.Status_STATUS_INVALID:
		return 2
	case messages.Status_STATUS_UNAUTHENTICATED:
		return 5
	default:
		return 1
	}
}
