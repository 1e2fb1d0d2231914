package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/cluster"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver/process"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

// Config configures a gateway node.
type Config struct {
	StateDir string
	// Listen is the API address (default 127.0.0.1:7420).
	Listen string
	Log    zerolog.Logger
	// Binary is the stockade binary started as supervisor (default: this one).
	Binary string
	// Boundary settings for every sandbox.
	Hosts         string
	DNSUpstream   string
	AllowLoopback bool
	// MaxConns caps each sandbox's concurrent mediated connections (0: 1,024).
	MaxConns int
	// MaxSandboxesPerClient is how many sandboxes one client that is not
	// an admin may have created at once (0:
	// sandbox.DefaultMaxSandboxesPerClient; -1: no quota).
	MaxSandboxesPerClient int
	// Unconfined starts sandboxes without seccomp and cgroup: only for the
	// benchmark that measures their cost.
	Unconfined bool
	Lifecycle  lifecycle.Config
	// RelayListen is where clients and supervisors meet for SSH relays.
	// Empty: the host of Listen, on a free port chosen at start, so two
	// gateways with different Listen addresses never collide on it. The
	// address is advertised, not assumed: clients get it in each
	// RelayRequest reply, supervisors in each OpenRelay.
	RelayListen string
	// Ready, if set, is called once the API serves, with what it serves;
	// its error stops the gateway.
	Ready func(Served) error
	// Faults is the gateway's fault seam (store writes); a FaultRequest
	// naming no sandbox arms it at run time. Nil: no faults, and such a
	// request is refused.
	Faults *fault.Set
	// Counters receives the supervision directives of the gateway's actors
	// (default: a fresh set); the caller may export it as metrics.
	Counters *supervise.Counters
	// Chaos accepts FaultRequests at run time, for the gateway and every
	// supervisor; without it every FaultRequest is refused.
	Chaos bool
	// Node names this gateway node in its certificate (default "local").
	Node string
	// Refused counts what the transport refused (default: a fresh set);
	// the caller may export it as metrics.
	Refused *transport.Refusals
	// Etcd are the etcd client URLs of a cluster of nodes; empty: a single
	// node with its state in bbolt. Node must name this node uniquely.
	Etcd []string
	// EtcdPrefix starts the cluster's keys (default cluster.DefaultPrefix).
	EtcdPrefix string
	// Host names this machine in a cluster (default: its hostname): the
	// nodes of one host share its sandboxes (state dir, supervisors).
	Host string
	// LeaseTTL is the node's lease TTL in a cluster (default
	// cluster.DefaultTTL).
	LeaseTTL time.Duration
	// EtcdTLS is the TLS of the cluster's etcd connections (nil: plain).
	EtcdTLS *tls.Config
	// ClusterStats receives the cluster node's counters (default: fresh
	// ones); the caller may export them as metrics.
	ClusterStats *cluster.Stats
	// IDPool is where a root gateway takes each sandbox's own host
	// uid/gid range (zero: idrange.DefaultPool); it must stay clear of
	// the ranges and ids of IDHostFiles (zero: idrange.DefaultHostFiles)
	// or the gateway does not start. IDClaims is the host-wide claim
	// directory (empty: idrange.DefaultClaimDir). An unprivileged gateway
	// maps only its own ids and refuses an IDPool.
	IDPool      idrange.Range
	IDHostFiles idrange.HostFiles
	IDClaims    string
}

// Served is what a ready gateway serves: its API and relay addresses and
// its state dir (absolute).
type Served struct{ API, Relay, StateDir string }

// Run serves until ctx is done. Sandboxes (their supervisors and
// workloads) keep running when the gateway stops; the next Run re-adopts
// them.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Listen == "" {
		cfg.Listen = contract.DefaultGateway
	}
	// Supervisors run in their sandbox's directory: hand them absolute paths.
	for _, p := range []*string{&cfg.StateDir, &cfg.Hosts} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return fmt.Errorf("gateway: %s: %w", *p, err)
			}
			*p = abs
		}
	}
	if cfg.Hosts != "" {
		if _, err := os.Stat(cfg.Hosts); err != nil {
			return fmt.Errorf("gateway: --hosts: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("gateway: state dir %s: %w", cfg.StateDir, err)
	}
	ids, err := idAllocator(cfg)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if cfg.Node == "" {
		cfg.Node = "local"
	}
	if cfg.Refused == nil {
		cfg.Refused = transport.NewRefusals()
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: --listen %q: %w", cfg.Listen, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		// protoactor addresses actors by host:port: peers must use the
		// address the gateway calls itself.
		return fmt.Errorf("gateway: --listen %s: give the address clients and supervisors will use (e.g. --listen 192.0.2.10:7420), not a wildcard", cfg.Listen)
	}
	clustered := len(cfg.Etcd) > 0
	var (
		st    sandbox.Store
		certs certStore
		node  *cluster.Node
		// toSandboxes delivers the cluster's ownership events once the
		// sandboxes actor exists (earlier ones are covered by its start:
		// it spawns what the node owns then).
		toSandboxes atomic.Pointer[func(cluster.Event)]
	)
	if !clustered {
		var storeOpts []store.Option
		if cfg.Faults != nil {
			storeOpts = append(storeOpts, store.WithFaults(cfg.Faults))
		}
		bolt, err := store.Open(contract.StateDir(cfg.StateDir).Store(), storeOpts...)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		defer bolt.Close()
		st, certs = bolt, bolt
	}
	port, _ := strconv.Atoi(portStr)
	// protoactor's remote panics when it cannot listen: check first.
	if ln, err := net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("gateway: API address %s: %w (is another gateway running?)", cfg.Listen, err)
	} else if port == 0 {
		port = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	} else {
		_ = ln.Close()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	relayTCP, relayAddr, err := listenRelay(cfg.RelayListen, host)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer relayTCP.Close()
	if clustered {
		if cfg.Host == "" {
			if cfg.Host, err = os.Hostname(); err != nil {
				return fmt.Errorf("gateway: name this host with --host-id: %w", err)
			}
		}
		var faults fault.Injector
		if cfg.Faults != nil { // a nil *fault.Set in the interface would not be nil
			faults = cfg.Faults
		}
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		node, err = cluster.Join(jctx, cluster.Config{Endpoints: cfg.Etcd, Prefix: cfg.EtcdPrefix, TTL: cfg.LeaseTTL, Log: cfg.Log, Stats: cfg.ClusterStats, Faults: faults, TLS: cfg.EtcdTLS,
			Self: cluster.NodeInfo{Node: cfg.Node, Host: cfg.Host, API: addr, Relay: relayAddr}},
			func(e cluster.Event) {
				if f := toSandboxes.Load(); f != nil {
					(*f)(e)
				}
			})
		cancel()
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		defer node.Close()
		st, certs = node.Store(), node
	}
	var clientView *store.ClientIndex
	if clustered {
		clientView = node.Clients()
	}
	pk, err := openPKI(cfg.StateDir, cfg.Node, certs, clientView)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	rules, peers := transport.GatewayRules(), []trust.Role{trust.RoleClient, trust.RoleSupervisor}
	if clustered {
		pk.elsewhere = node.Revoked
		rules, peers = transport.ClusterRules(), append(peers, trust.RoleGateway)
	}
	sys := transport.NewActorSystem(logx.ActorSystemOption(cfg.Log))
	retries := 0 // transport's default
	if clustered {
		// Another node killed and restarted on its address is back in a
		// few seconds: what this node queued for it (an owner's answer to
		// a request it relayed) waits for it (see ARCHITECTURE.md
		// "Cluster").
		retries = nodeConnectRetries
	}
	// One Admission for the API and the relay listener: their caps on
	// connections in their handshake and on each identity's established
	// ones, the sweep that closes the connections and relays of a revoked
	// certificate (each verifier asks pk's view of the client records,
	// which a cluster node keeps from etcd), and their refusal log's
	// bound, are the gateway's.
	adm := transport.NewAdmission(transport.Limits{}, cfg.Refused, cfg.Log)
	defer func() {
		adm.FlushLog()
		_ = adm.Close()
	}()
	rem, err := transport.Start(sys, transport.Config{Host: host, Port: port, Cert: pk.node,
		Verifier: pk.verifier(peers...), Rules: rules, Log: cfg.Log, Admission: adm, ConnectRetries: retries})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	bin := cfg.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("gateway: find stockade binary: %w", err)
		}
	}
	// Relays are TLS too: clients and supervisors with their certificates.
	relayVerifier := pk.verifier(trust.RoleClient, trust.RoleSupervisor)
	relayLn := tls.NewListener(relayTCP, trust.ServerConfig(pk.node, relayVerifier))
	counters := cfg.Counters
	if counters == nil {
		counters = supervise.NewCounters()
	}
	caPEM := string(pk.ca.CertPEM)
	pcfg := process.Config{StateDir: cfg.StateDir, Gateway: addr, Binary: bin, Chaos: cfg.Chaos,
		Credentials: func(name string) (spec.Credentials, error) {
			certPEM, keyPEM, _, err := pk.ca.IssueKeyPair(trust.Identity{Role: trust.RoleSupervisor, Name: name}, supervisorValidity)
			return spec.Credentials{CA: caPEM, Cert: string(certPEM), Key: string(keyPEM)}, err
		},
		Hosts: cfg.Hosts, DNSUpstream: cfg.DNSUpstream, AllowLoopback: cfg.AllowLoopback, MaxConns: cfg.MaxConns, Unconfined: cfg.Unconfined,
		Defaults: sandbox.DefaultLimits(), IDClaims: cfg.IDClaims}
	if cfg.Faults != nil { // a nil *fault.Set in the interface would not be nil
		pcfg.Faults = cfg.Faults
	}
	var view sandbox.Cluster
	gateways := []string{addr}
	if clustered {
		cv := clusterView{node}
		view, pcfg.Gateways, gateways = cv, cv.Gateways, cv.Gateways()
	}
	// One bound on the lines logging refused client requests, for the API
	// and the sandboxes actors.
	refusals := sandbox.NewRefusalLog(cfg.Log)
	defer refusals.Flush()
	env := &sandbox.Env{Cluster: view, Gateway: addr, Store: st, Driver: process.New(pcfg), Clock: sandbox.SystemClock{}, StateDir: cfg.StateDir,
		Lifecycle: cfg.Lifecycle, Log: cfg.Log, Counters: counters, Clients: pk, Self: pk.self, IDs: ids,
		Refusals: refusals, MaxSandboxesPerClient: cfg.MaxSandboxesPerClient,
		RelayAddr: relayAddr, RelayListener: actor.NewPID(sys.Address(), "gateway/relay-listener")}
	gaveUp := make(chan string, 1)
	// The API actor (clients) and the hello actor (supervisors) are the
	// root's children like the rest, so the root's strategy logs, counts
	// and gives up on them too; their ids are well known to remote peers.
	sandboxes := actor.NewPID(sys.Address(), transport.SandboxesActor)
	rootProps := treeProps(cfg.Log, counters, gaveUp, []child{
		{"relay-listener", relay.ListenerProps(relayLn, relayVerifier, adm, cfg.Log)},
		{"sandboxes", sandbox.Props(env)},
		{path.Base(transport.APIActor), apiProps(&apiActor{log: cfg.Log, faults: cfg.Faults, chaos: cfg.Chaos, pki: pk, sandboxes: sandboxes,
			auth: sandbox.Authority{Clients: pk, Self: pk.self, Log: cfg.Log, Refusals: refusals}})},
		{path.Base(transport.HelloActor), actor.PropsFromProducer(func() actor.Actor { return &helloActor{log: cfg.Log, sandboxes: sandboxes} },
			actor.WithReceiverMiddleware(supervise.PanicStack(cfg.Log)))},
	})
	if clustered {
		// Nothing here publishes remote.EndpointTerminatedEvent for a node
		// that (re)joins: protoactor keys that event by address only, and a
		// writer it stops closes its connection, whose reader then
		// publishes the event again and stops the writer made next for the
		// same address, and so on while traffic flows, each time losing
		// what was queued (measured in the cluster chaos run; see
		// ARCHITECTURE.md "Cluster").
		send := func(e cluster.Event) { sys.Root.Send(sandboxes, ownershipOf(e)) }
		toSandboxes.Store(&send)
	}
	root, err := sys.Root.SpawnNamed(rootProps, "gateway")
	if err != nil {
		return fmt.Errorf("gateway: spawn root: %w", err)
	}
	if _, err := sys.Root.RequestFuture(root, &rootReady{}, 10*time.Second).Result(); err != nil {
		return fmt.Errorf("gateway: root did not start: %w", err)
	}
	if err := pk.writeLocalConfig(ctx, cfg.StateDir, gateways); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	cfg.Log.Info().Str("api", addr).Str("relay", env.RelayAddr).Str("state_dir", cfg.StateDir).Msg("gateway ready")
	if cfg.Ready != nil {
		if err := cfg.Ready(Served{API: addr, Relay: env.RelayAddr, StateDir: cfg.StateDir}); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	select {
	case <-ctx.Done():
	case why := <-gaveUp:
		return fmt.Errorf("gateway gave up: %s", why)
	}
	_ = sys.Root.StopFuture(root).Wait()
	return nil
}

// listenRelay opens the relay listener and returns the address to
// advertise for it. An empty listen means apiHost on a free port; a
// wildcard host (0.0.0.0, ::) listens everywhere but is advertised as
// apiHost, the address peers already reach the gateway at.
func listenRelay(listen, apiHost string) (net.Listener, string, error) {
	if listen == "" {
		listen = net.JoinHostPort(apiHost, "0")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("relay address %s: %w (another process has it: leave --relay-listen empty for a free port on the --listen host, or give another)", listen, err)
	}
	host, _, _ := net.SplitHostPort(listen)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return ln, net.JoinHostPort(apiHost, port), nil
	}
	return ln, ln.Addr().String(), nil
}

// rootReady asks the root whether it has spawned its children.
type rootReady struct{}

// child is one child of the gateway's root actor.
type child struct {
	name  string
	props *actor.Props
}

// nodeConnectRetries: a cluster node tries a connection to a peer this
// often, 2 s apart (about 16 s), before dropping what it queued for it.
const nodeConnectRetries = 8

// giveUpAfter failures of one child within giveUpWindow stop the gateway.
const (
	giveUpAfter  = 10
	giveUpWindow = 10 * time.Second
)

// treeProps are the props of the gateway's root ("gateway"): it spawns
// kids and supervises them one for one, restarting a failed child; a child
// failing giveUpAfter times within giveUpWindow is reported on gaveUp
// (and Run stops the gateway). Every directive is logged and counted.
func treeProps(log zerolog.Logger, counters *supervise.Counters, gaveUp chan<- string, kids []child) *actor.Props {
	strategy := supervise.OneForOne(giveUpAfter, giveUpWindow, supervise.RestartOnFailure,
		supervise.WithLogger(log), supervise.WithCounters(counters),
		supervise.WithOnGiveUp(func(child *actor.PID, reason any) {
			select {
			case gaveUp <- fmt.Sprintf("%s failed %d times in %s (last: %v)", child.GetId(), giveUpAfter, giveUpWindow, reason):
			default:
			}
		}))
	return actor.PropsFromProducer(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			switch c.Message().(type) {
			case *actor.Started:
				for _, k := range kids {
					if _, err := c.SpawnNamed(k.props, k.name); err != nil {
						panic(fmt.Errorf("spawn %s: %w", k.name, err))
					}
				}
			case *rootReady:
				c.Respond(&rootReady{}) // after Started: the children exist
			}
		})
	}, actor.WithSupervisor(strategy))
}

// apiProps are the props of the API actor a (a restart keeps its fields).
func apiProps(a *apiActor) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { c := *a; return &c },
		actor.WithReceiverMiddleware(supervise.PanicStack(a.log)))
}

// apiActor serves clients: it checks that the caller is a client (the
// transport already did) whose role may make the request at all (package
// access: the sandbox's actor checks again, with the sandbox's creator),
// answers certificate requests and gateway faults itself, and forwards the
// rest to sandboxes; replies go straight back to the requester.
type apiActor struct {
	log       zerolog.Logger
	faults    *fault.Set
	chaos     bool
	pki       *pki
	sandboxes *actor.PID
	// auth checks callers against the client records (nil pki: only
	// callers inside this process).
	auth sandbox.Authority
}

func (a *apiActor) Receive(ctx actor.Context) {
	req, ok := sandbox.RequestOf(ctx.Message())
	if !ok {
		return
	}
	switch ctx.Message().(type) {
	case *messages.CreateRequest, *messages.SandboxRequest, *messages.ListRequest, *messages.RelayRequest, *messages.PolicyRequest,
		*messages.LogsRequest, *messages.LogsAck:
		if a.faults != nil {
			// The fault seam of the API itself (tests, chaos): a panic
			// here is the API actor failing.
			if err := a.faults.Inject(fault.APIRequest); err != nil {
				ctx.Respond(errdefs.Reply(errdefs.Unavailable("gateway: %w", err)))
				return
			}
		}
	}
	// A remote caller must be a client (the transport routes only clients
	// here) whose role may make req at all.
	caller, ok := a.auth.Allow(ctx, req, true)
	if !ok {
		return
	}
	by := caller.ID
	switch m := ctx.Message().(type) {
	case *messages.FaultRequest:
		if !a.chaos {
			ctx.Respond(errdefs.Reply(errdefs.Invalid("faults are off: this gateway runs without --chaos (faults are for tests and the chaos harness)")))
			return
		}
		if m.Name == "" {
			ctx.Respond(a.armFault(m.Rule))
			return
		}
	case *messages.IssueRequest:
		ctx.Respond(a.issue(m, by))
		return
	case *messages.RevokeRequest:
		ctx.Respond(a.revoke(m, by))
		return
	case *messages.ClientListRequest:
		ctx.Respond(a.listClients())
		return
	}
	ctx.Forward(a.sandboxes)
}

// armFault arms a rule in the gateway's own fault set.
func (a *apiActor) armFault(rule string) *messages.Reply {
	if a.faults == nil {
		return errdefs.Reply(errdefs.Invalid("this gateway runs without a fault seam"))
	}
	fired, err := a.faults.Apply(rule)
	if err != nil {
		return errdefs.Reply(errdefs.Invalid("%w", err))
	}
	a.log.Warn().Str("rule", rule).Int("fired_before", fired).Msg("gateway fault armed by request")
	return &messages.Reply{Status: messages.Status_STATUS_OK, Message: "armed " + rule + " in the gateway", Fired: int64(fired)}
}

// issue certifies a client key with a role (and an operator's
// sandboxes), asked for by by (an admin: Receive checked).
func (a *apiActor) issue(m *messages.IssueRequest, by trust.Identity) *messages.Reply {
	if err := sandbox.CheckName(m.Name); err != nil {
		return errdefs.Reply(errdefs.Invalid("%s", strings.Replace(err.Error(), "sandbox name", "client name", 1)))
	}
	if m.Role == "" {
		return errdefs.Reply(errdefs.Invalid("client %s: name its role (--role admin, operator or viewer): a viewer reads, an operator drives the sandboxes it creates or is granted, an admin does everything", m.Name))
	}
	role, err := access.ParseRole(m.Role)
	if err != nil {
		return errdefs.Reply(errdefs.Invalid("client %s: %w", m.Name, err))
	}
	if m.Name == LocalClient && role != access.Admin {
		// The gateway renews this one at its start, as an admin: another
		// role for the name would stop that (a live name keeps its role).
		return errdefs.Reply(errdefs.Invalid("client %s is the local admin's name (the configuration `gateway run` writes): it is always an admin; pick another name", m.Name))
	}
	if len(m.Sandboxes) > 0 && role != access.Operator {
		return errdefs.Reply(errdefs.Invalid("client %s: --sandbox grants sandboxes to an operator; a %s has the same access to every sandbox", m.Name, role))
	}
	for _, s := range m.Sandboxes {
		if err := sandbox.CheckName(s); err != nil {
			return errdefs.Reply(errdefs.Invalid("client %s: --sandbox: %w", m.Name, err))
		}
	}
	pub, err := x509.ParsePKIXPublicKey(m.PublicKey)
	if err != nil {
		return errdefs.Reply(errdefs.Invalid("client %s: public key: %w", m.Name, err))
	}
	in := issue{name: m.Name, role: role, sandboxes: slices.Compact(slices.Sorted(slices.Values(m.Sandboxes))), by: by,
		validity: time.Duration(m.ValiditySeconds) * time.Second, reuse: m.ReuseName}
	certPEM, cert, err := a.pki.issueClient(context.Background(), in, pub)
	if err != nil {
		if errdefs.Is(err, errdefs.KindRefused) {
			return errdefs.Reply(err)
		}
		return errdefs.Reply(errdefs.Internal("client %s: %w", m.Name, err))
	}
	a.log.Info().Str("client", m.Name).Str("role", string(role)).Strs("sandboxes", in.sandboxes).Str("serial", cert.SerialNumber.Text(16)).
		Time("not_after", cert.NotAfter).Str("by", by.String()).Msg("client certificate issued")
	granted := ""
	if len(in.sandboxes) > 0 {
		granted = " (sandboxes " + strings.Join(in.sandboxes, ", ") + ")"
	}
	return &messages.Reply{Status: messages.Status_STATUS_OK, Certificate: certPEM, Ca: a.pki.ca.CertPEM,
		Message: fmt.Sprintf("client %s: %s%s, certificate %s valid until %s, issued by %s", m.Name, role, granted,
			cert.SerialNumber.Text(16), cert.NotAfter.UTC().Format(time.RFC3339), by)}
}

// revoke revokes every certificate of a client name, and what they issued
// (transitively, by certificate), asked for by by.
func (a *apiActor) revoke(m *messages.RevokeRequest, by trust.Identity) *messages.Reply {
	revoked, err := a.pki.revoke(context.Background(), m.Name)
	if err != nil {
		return errdefs.Reply(errdefs.Internal("client %s: %w", m.Name, err))
	}
	if len(revoked) == 0 {
		return errdefs.Reply(errdefs.NotFound("no unrevoked certificate was issued to a client named %q (stockade client list shows them)", m.Name))
	}
	counts, localAdmin := map[string]int{}, false
	for _, c := range revoked {
		counts[c.Name]++
		localAdmin = localAdmin || (c.Name == LocalClient && strings.HasPrefix(c.IssuedBy, string(trust.RoleGateway)+":"))
	}
	var also []string
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		if name != m.Name {
			also = append(also, fmt.Sprintf("%s (%d)", name, counts[name]))
		}
	}
	a.log.Warn().Str("client", m.Name).Int("certificates", len(revoked)).Strs("issued_by_it", also).Str("by", by.String()).Msg("client revoked")
	msg := fmt.Sprintf("client %s: %d certificate(s) revoked; refused from the next connection", m.Name, counts[m.Name])
	if len(also) > 0 {
		msg += "; revoked with it, as clients it issued (or their clients): " + strings.Join(also, ", ")
	}
	if localAdmin {
		msg += " (the gateway issues a new local admin certificate into its state dir at its next start)"
	}
	return &messages.Reply{Status: messages.Status_STATUS_OK, Message: msg}
}

// listClients lists every recorded client certificate: what each name may
// do (for a live one; as recorded for a revoked or expired one), its
// issuer, serial, validity and revocation.
func (a *apiActor) listClients() *messages.Reply {
	reply := &messages.Reply{Status: messages.Status_STATUS_OK}
	for _, c := range a.pki.clients.All() {
		g, _ := access.Resolve(c.Name, []access.Issued{{Role: c.Role, Sandboxes: c.Sandboxes}})
		info := &messages.ClientInfo{Name: c.Name, Role: string(g.Role), Sandboxes: g.Sandboxes, IssuedBy: c.IssuedBy, Serial: c.Serial,
			NotAfterUnixMs: c.NotAfter.UnixMilli(), Note: g.Note}
		if !c.Issued.IsZero() {
			info.IssuedUnixMs = c.Issued.UnixMilli()
		}
		if !c.Revoked.IsZero() {
			info.RevokedUnixMs = c.Revoked.UnixMilli()
		}
		reply.Clients = append(reply.Clients, info)
	}
	return reply
}

// helloActor is the supervisors' door: a Hello is accepted only for the
// sandbox the supervisor's certificate names.
type helloActor struct {
	log       zerolog.Logger
	sandboxes *actor.PID
}

func (h *helloActor) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(*messages.Hello)
	if !ok {
		return
	}
	id, remote := transport.Peer(ctx)
	if remote && (id.Role != trust.RoleSupervisor || id.Name != m.Sandbox) {
		h.log.Warn().Str("peer", id.String()).Str("sandbox", m.Sandbox).Msg("Hello refused: the certificate names another sandbox")
		ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_UNAUTHENTICATED, Message: "this certificate is not for sandbox " + m.Sandbox})
		return
	}
	ctx.Forward(h.sandboxes)
}

// idAllocator is the allocator of the sandboxes' host id ranges of a root
// gateway: its pool checked (idrange.CheckPool) and clear of the host's
// subordinate ranges and user and group ids (idrange.CheckHost), or the
// gateway does not start. Unprivileged: nil (each sandbox maps only the
// gateway's own uid and gid), and a pool is refused.
func idAllocator(cfg Config) (*idrange.Allocator, error) {
	if os.Geteuid() != 0 {
		if cfg.IDPool != (idrange.Range{}) {
			return nil, fmt.Errorf("--uid-pool %s: only a gateway running as root gives sandboxes host id ranges; unprivileged, each sandbox maps only the gateway's own uid and gid (drop the flag)", cfg.IDPool)
		}
		return nil, nil
	}
	pool, files, claims := cfg.IDPool, cfg.IDHostFiles, cfg.IDClaims
	if pool == (idrange.Range{}) {
		pool = idrange.DefaultPool()
	}
	if files == (idrange.HostFiles{}) {
		files = idrange.DefaultHostFiles()
	}
	if claims == "" {
		claims = idrange.DefaultClaimDir()
	}
	if err := idrange.CheckPool(pool); err != nil {
		return nil, err
	}
	if err := idrange.CheckHost(pool, files); err != nil {
		return nil, err
	}
	a, err := idrange.NewAllocator(pool, idrange.NewClaims(claims))
	if err != nil {
		return nil, err
	}
	cfg.Log.Info().Str("uid_pool", pool.String()).Str("claims", claims).Msg("each sandbox gets its own host uid/gid range of this pool")
	return a, nil
}
