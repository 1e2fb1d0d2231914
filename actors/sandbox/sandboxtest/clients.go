package sandboxtest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/transport"
)

// Clients is a fake of the Clients seam (what each client may do): the
// grants a test sets, by client name. The gateway's own is its PKI's
// records, tested in actors/gateway.
type Clients struct {
	mu sync.Mutex
	m  map[string]access.Grant
}

// NewClients returns client records with none recorded.
func NewClients() *Clients { return &Clients{m: map[string]access.Grant{}} }

// Access implements the seam: a client never set has no live certificate.
func (c *Clients) Access(name string) (access.Grant, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.m[name]
	if !ok {
		return access.Grant{}, fmt.Errorf("client %s has no live certificate recorded at this gateway", name)
	}
	return g, nil
}

// GrantedTo implements the seam: the operators whose grant names sandbox.
func (c *Clients) GrantedTo(sandbox string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, g := range c.m {
		if g.Role == access.Operator && slices.Contains(g.Sandboxes, sandbox) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Set records what client name may do.
func (c *Clients) Set(name string, g access.Grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[name] = g
}

// RequestAs sends msg to to as a message from a remote peer arrives (the
// transport's PeerHeader names it, e.g. "client:bob") and waits for the
// answer.
func RequestAs(sys *actor.ActorSystem, to *actor.PID, peer string, msg any, timeout time.Duration) (any, error) {
	f := actor.NewFuture(sys, timeout)
	sys.Root.Send(to, &actor.MessageEnvelope{Header: map[string]string{transport.PeerHeader: peer}, Message: msg, Sender: f.PID()})
	return f.Result()
}
