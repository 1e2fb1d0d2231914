package gateway

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/store"
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
	Lifecycle     lifecycle.Config
	// RelayListen is where clients and supervisors meet for SSH relays
	// (default 127.0.0.1:7421; port 0 picks one).
	RelayListen string
	// Ready, if set, is called once the API serves.
	Ready func(addr string)
	// Faults is the gateway's fault seam (store writes); a FaultRequest
	// naming no sandbox arms it at run time. Nil: no faults, and such a
	// request is refused.
	Faults *fault.Set
	// Counters receives the supervision directives of the gateway's actors
	// (default: a fresh set); the caller may export it as metrics.
	Counters *supervise.Counters
}

// Run serves until ctx is done. Sandboxes (their supervisors and
// workloads) keep running when the gateway stops; the next Run re-adopts
// them.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Listen == "" {
		cfg.Listen = client.DefaultGateway
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
	tok, err := ensureToken(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	var storeOpts []store.Option
	if cfg.Faults != nil {
		storeOpts = append(storeOpts, store.WithFaults(cfg.Faults))
	}
	st, err := store.Open(cfg.StateDir+"/state.db", storeOpts...)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer st.Close()
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: --listen %q: %w", cfg.Listen, err)
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
	sys := actor.NewActorSystem(logx.ActorSystemOption(cfg.Log))
	rem := remote.NewRemote(sys, remote.Configure(host, port))
	if err := client.StartRemote(rem); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer func() {
		rem.Shutdown(false)
		sys.Shutdown()
	}()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	bin := cfg.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("gateway: find stockade binary: %w", err)
		}
	}
	if cfg.RelayListen == "" {
		cfg.RelayListen = "127.0.0.1:7421"
	}
	relayLn, err := net.Listen("tcp", cfg.RelayListen)
	if err != nil {
		return fmt.Errorf("gateway: relay address %s: %w (is another gateway running? set --relay-listen)", cfg.RelayListen, err)
	}
	defer relayLn.Close()
	counters := cfg.Counters
	if counters == nil {
		counters = supervise.NewCounters()
	}
	env := &sandbox.Env{Store: st, StateDir: cfg.StateDir, Gateway: addr, Token: tok, Binary: bin,
		Hosts: cfg.Hosts, DNSUpstream: cfg.DNSUpstream, AllowLoopback: cfg.AllowLoopback,
		Lifecycle: cfg.Lifecycle, Log: cfg.Log, Counters: counters,
		RelayAddr: relayLn.Addr().String(), RelayListener: actor.NewPID(sys.Address(), "gateway/relay-listener")}

	if cfg.Faults != nil {
		env.Faults = cfg.Faults
	}
	gaveUp := make(chan string, 1)
	rootStrategy := supervise.OneForOne(10, 10*time.Second, supervise.RestartOnFailure,
		supervise.WithLogger(cfg.Log), supervise.WithCounters(counters),
		supervise.WithOnGiveUp(func(child *actor.PID, reason any) {
			select {
			case gaveUp <- fmt.Sprintf("%s failed 10 times in 10 s (last: %v)", child.GetId(), reason):
			default:
			}
		}))
	rootProps := actor.PropsFromProducer(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if _, ok := c.Message().(*actor.Started); ok {
				if _, err := c.SpawnNamed(relay.ListenerProps(relayLn, cfg.Log), "relay-listener"); err != nil {
					panic(fmt.Errorf("spawn relay-listener: %w", err))
				}
				if _, err := c.SpawnNamed(sandbox.Props(env), "sandboxes"); err != nil {
					panic(fmt.Errorf("spawn sandboxes: %w", err))
				}
			}
		})
	}, actor.WithSupervisor(rootStrategy))
	root, err := sys.Root.SpawnNamed(rootProps, "gateway")
	if err != nil {
		return fmt.Errorf("gateway: spawn root: %w", err)
	}
	// The API actor has a well-known top-level id ("api") so remote clients
	// can address it; it is supervised by the same strategy.
	apiProps := actor.PropsFromProducer(func() actor.Actor {
		return &apiActor{token: tok, log: cfg.Log, faults: cfg.Faults, sandboxes: actor.NewPID(sys.Address(), "gateway/sandboxes")}
	}, actor.WithSupervisor(rootStrategy), actor.WithReceiverMiddleware(supervise.PanicStack(cfg.Log)))
	api, err := sys.Root.SpawnNamed(apiProps, client.APIActor)
	if err != nil {
		return fmt.Errorf("gateway: spawn api: %w", err)
	}
	cfg.Log.Info().Str("api", addr).Str("relay", env.RelayAddr).Str("state_dir", cfg.StateDir).Msg("gateway ready")
	if cfg.Ready != nil {
		cfg.Ready(addr)
	}
	select {
	case <-ctx.Done():
	case why := <-gaveUp:
		return fmt.Errorf("gateway gave up: %s", why)
	}
	_ = sys.Root.StopFuture(api).Wait()
	_ = sys.Root.StopFuture(root).Wait()
	return nil
}

// apiActor authenticates remote requests and forwards them to sandboxes;
// replies go straight back to the requester.
type apiActor struct {
	token     string
	log       zerolog.Logger
	faults    *fault.Set
	sandboxes *actor.PID
}

func (a *apiActor) Receive(ctx actor.Context) {
	var tok string
	switch m := ctx.Message().(type) {
	case *messages.CreateRequest:
		tok = m.Token
	case *messages.SandboxRequest:
		tok = m.Token
	case *messages.ListRequest:
		tok = m.Token
	case *messages.RelayRequest:
		tok = m.Token
	case *messages.FaultRequest:
		tok = m.Token
	case *messages.PolicyRequest:
		tok = m.Token
	case *messages.Hello:
		if !tokenOK(a.token, m.Token) {
			a.refuse(ctx)
			ctx.Respond(&messages.HelloAck{Status: messages.Status_STATUS_UNAUTHENTICATED, Message: "wrong token"})
			return
		}
		ctx.Forward(a.sandboxes)
		return
	default:
		return
	}
	if !tokenOK(a.token, tok) {
		a.refuse(ctx)
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_UNAUTHENTICATED,
			Message: "wrong or missing client token: use the gateway's <state-dir>/client.token (--state-dir) or set STOCKADE_TOKEN"})
		return
	}
	if f, ok := ctx.Message().(*messages.FaultRequest); ok && f.Name == "" {
		ctx.Respond(a.armFault(f.Rule))
		return
	}
	ctx.Forward(a.sandboxes)
}

// armFault arms a rule in the gateway's own fault set.
func (a *apiActor) armFault(rule string) *messages.Reply {
	if a.faults == nil {
		return &messages.Reply{Status: messages.Status_STATUS_REFUSED, Message: "this gateway runs without a fault seam (start it with --fault or --chaos)"}
	}
	fired, err := a.faults.Apply(rule)
	if err != nil {
		return &messages.Reply{Status: messages.Status_STATUS_INVALID, Message: err.Error()}
	}
	a.log.Warn().Str("rule", rule).Int("fired_before", fired).Msg("gateway fault armed by request")
	return &messages.Reply{Status: messages.Status_STATUS_OK, Message: "armed " + rule + " in the gateway", Fired: int64(fired)}
}

func (a *apiActor) refuse(ctx actor.Context) {
	from := "unknown"
	if s := ctx.Sender(); s != nil {
		from = s.Address
	}
	a.log.Warn().Str("from", from).Str("message_type", fmt.Sprintf("%T", ctx.Message())).Msg("request refused: wrong or missing token")
}
