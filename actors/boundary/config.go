package boundary

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

// DefaultMaxConns is Config.MaxConns's default.
const DefaultMaxConns = 1024

// DefaultIdleConnActors is Config.IdleConnActors's default: an idle conn
// actor holds no goroutine, only its context and mailbox.
const DefaultIdleConnActors = 256

// DefaultKeepAliveSweep is Config.KeepAliveSweep's default.
const DefaultKeepAliveSweep = 15 * time.Second

// ConnectQuery is what a connection actor asks the policy.
type ConnectQuery struct {
	Host         string // normalised: lower-case, no trailing dot
	Port         int
	Exe          string
	Ancestors    []string
	IdentityNone bool // endpoint-only matching: binaries are ignored
}

// ConnectVerdict is the policy's answer to a ConnectQuery.
type ConnectVerdict struct {
	Allow      bool
	Reason     reason.Code
	Policy     string // the network_policies key
	PolicyName string // its name field, when it differs from the key
	Message    string
	Version    uint64
	AllowedIPs []netip.Prefix
	ExactHost  bool
}

// Decider is the policy as the boundary's actors see it.
type Decider interface {
	DecideConnect(ctx context.Context, q ConnectQuery) ConnectVerdict
	dnsproxy.Decider
}

// Config is everything the boundary's actors share. The listeners are
// owned by the boundary actor: a restarted proxy or dns actor keeps
// serving on the same sockets.
type Config struct {
	// Proxy is the HTTP proxy listener (nil: no proxy).
	Proxy net.Listener
	// DNSPacket and DNSStream are the DNS listeners (nil: none).
	DNSPacket net.PacketConn
	DNSStream net.Listener

	Decider  Decider
	Identity identity.Resolver
	// Resolver resolves CONNECT targets (a static hosts file or the system).
	Resolver proxy.Resolver
	// DNSUpstream answers allowed DNS names.
	DNSUpstream   dnsproxy.Upstream
	AllowLoopback bool
	Audit         audit.Sink
	Injector      fault.Injector
	Log           zerolog.Logger
	// LogOut, when set, is Log's destination: Serve's log sink writes a
	// batch's decision lines (a DNS read's denials) in one call to it.
	LogOut audit.EventsWriter
	// Counters receives every supervision directive of the tree.
	Counters *supervise.Counters
	// Sandbox names the sandbox in audit events ("" for a standalone boundary).
	Sandbox string

	// HeaderTimeout bounds reading a proxy request header (default 10 s).
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving and dialing an upstream (default 10 s).
	DialTimeout time.Duration
	// IdleTimeout bounds an idle DNS-over-TCP connection (default 10 s).
	IdleTimeout time.Duration
	// KeepAliveSweep is how often the proxy actor turns TCP keep-alive on
	// (the first probe after 15 s idle) for the upstream connections that
	// one sweep already saw (default 15 s): a connection that lives
	// through two sweeps gets it, a short one never pays its two socket
	// options.
	KeepAliveSweep time.Duration
	// MaxConns caps the concurrent mediated connections (proxy clients and
	// DNS-over-TCP streams) and, separately, the DNS queries in flight
	// (default 1,024). Over it a proxy client gets 503 connection_limit and
	// a query REFUSED, both audited: a flood from the workload cannot take
	// the descriptors the session and the relays need.
	MaxConns int
	// IdleConnActors caps the conn actors that wait for their next
	// connection (default 256); one finishing past it stops.
	IdleConnActors int
	// OnGiveUp runs when a listener actor exhausted its restart budget
	// (10 restarts in 10 s): the boundary can no longer serve.
	OnGiveUp func(kind string, reason any)
}

func (c *Config) defaults() {
	if c.Identity == nil {
		c.Identity = identity.None{}
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Audit == nil {
		c.Audit = audit.Discard{}
	}
	if c.Injector == nil {
		c.Injector = fault.Nop{}
	}
	if c.Counters == nil {
		c.Counters = supervise.NewCounters()
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.IdleConnActors <= 0 {
		c.IdleConnActors = DefaultIdleConnActors
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 10 * time.Second
	}
	if c.KeepAliveSweep <= 0 {
		c.KeepAliveSweep = DefaultKeepAliveSweep
	}
}
