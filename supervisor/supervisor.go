package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/actors/boundary"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/identity/connmap"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/internal/procs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy"
	"github.com/stockade-dev/stockade/sandbox/nsrun"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/supervisor/sshd"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/trust"
)

var errUnexpected = errors.New("unexpected reply type")

// The supervisor's own log (supervisor.log, `supervisor --log-file`) is
// rotated at LogMaxBytes, keeping LogKeep rotated files (supervisor.log.1
// is the newest): a creation's supervisor logs take at most
// (LogKeep+1) x LogMaxBytes.
const (
	LogMaxBytes = 16 << 20
	LogKeep     = 3
)

// CannotStartError is a start of the sandbox that fails the same way
// however often it is retried (nsrun.ErrCannotStart: the command is missing
// or not executable inside, a hard_requirement path is missing). Its text
// is the message for the user (path and fix).
type CannotStartError struct {
	Reason string // the message: what is wrong, where, and the fix
	Err    error  // the whole chain
}

func (e *CannotStartError) Error() string { return e.Reason }
func (e *CannotStartError) Unwrap() error { return e.Err }

// Run runs one supervisor instance until its workload has exited and the
// gateway knows, or a signal stops it. A sandbox that cannot start returns
// a *CannotStartError (its message on one line): the command exits with
// contract.ExitSupervisorCannotStart and prints it as its last line, which
// the gateway's driver reports as driver.ErrCannotStart, so the sandbox
// goes to Error/StartFailed without retries. Everything Run opened is
// closed before it returns.
func Run(ctx context.Context, specPath string, log zerolog.Logger, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	err := run(ctx, specPath, log, o)
	var cs *CannotStartError
	if errors.As(err, &cs) {
		log.Error().Err(err).Msg("the sandbox cannot start; the gateway will not retry")
		cs.Reason = oneLine(cs.Reason)
	}
	return err
}

// Option configures Run.
type Option func(*options)

type options struct{ logOut audit.EventsWriter }

// WithLogOut names the log's destination: the boundary's log sink then
// writes a batch of decision lines (a DNS read's denials) in one call.
func WithLogOut(w audit.EventsWriter) Option { return func(o *options) { o.logOut = w } }

// oneLine keeps a message on one line (the driver reads the last one).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func run(ctx context.Context, specPath string, log zerolog.Logger, o options) (err error) {
	// Taken first, so released last: a stop signal that arrives while the
	// sandbox is being taken down must not end the process before its
	// cgroup and files are released. The gateway signals the supervisor's
	// process group and the supervisor itself, so a stop delivers SIGTERM
	// twice when the first has been handled before the second is sent;
	// with the handler gone, the second took the default action and killed
	// the supervisor half-way through its deferred closes.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	defer func() { // after every other close, still under the handler
		if err == nil {
			log.Info().Msg("supervisor exits: sandbox stopped, resources released")
		}
	}()
	sp, err := spec.Read(specPath)
	if err != nil {
		return err
	}
	log = log.With().Str("sandbox", sp.Name).Str("instance", sp.Instance).Logger()
	dir := filepath.Dir(specPath)
	lock, err := lockSandbox(dir, sp.Name)
	if err != nil {
		return err
	}
	defer lock.Close()
	ids, err := holdHostIDs(sp, dir, log)
	if err != nil {
		return err
	}
	defer ids.close()

	faults := fault.NewSet() // armed at run time by FaultRequest (tests, chaos)
	engine := policy.NewEngine(policy.WithLogger(log), policy.WithFaults(faults))
	load := func() (uint64, error) { return engine.Load("policy.yaml", []byte(sp.Policy)) }
	if sp.PolicyVersion > 0 {
		load = func() (uint64, error) { return engine.LoadVersion("policy.yaml", []byte(sp.Policy), sp.PolicyVersion) }
	}
	if _, err := load(); err != nil {
		return fmt.Errorf("supervisor: policy: %w", err)
	}
	pol, version := engine.Current()

	logDir := sp.LogDir
	if logDir == "" { // a spec of an earlier gateway
		logDir = dir
	}
	out, err := openLogFile(filepath.Join(logDir, contract.WorkloadLog), sp.Limits.LogBytes)
	if err != nil {
		return err
	}
	// stdout and stderr apart, each line stamped, within the sandbox's log
	// limits, as the sandbox's init passes them on (workloadlog.go); the
	// deferred close runs after the sandbox is closed (init has passed on
	// all it had) and closes the file.
	wlog := newWorkloadLog(out, logLimitsOf(sp.Limits), clock.System{}, log)
	defer wlog.close()

	ns := nsrun.Spec{
		Argv: sp.Argv, Workspace: sp.Workspace, Workdir: sp.Workdir,
		// Init's own stderr (a crash's report) is this process's: the
		// supervisor's log.
		Output: wlog.output(), Stderr: os.Stderr, Logger: log,
		// The gateway's state dir (client token, other sandboxes) is never
		// visible inside, whatever the policy lists.
		Hidden:     []string{filepath.Dir(filepath.Dir(dir))},
		HostIDBase: ids.r.Base, HostIDCount: ids.r.Size,
	}
	if fs := pol.Filesystem; fs != nil {
		ns.Filesystem = nsrun.Filesystem{ReadOnly: fs.ReadOnly, ReadWrite: fs.ReadWrite, IncludeWorkdir: fs.IncludeWorkdir}
	}
	// Every sandbox gets the baseline (what a process needs to run) besides
	// the policy's lists; loopback hosts the policy allows go through the
	// boundary instead of NO_PROXY (ARCHITECTURE.md, "Where the build differs").
	base := policy.Baseline()
	ns.Filesystem.BaselineReadOnly, ns.Filesystem.BaselineReadWrite = base.ReadOnly, base.ReadWrite
	ns.ProxyLoopback = pol.LoopbackHosts()
	if pol.Landlock.Compatibility == policy.HardRequirement {
		ns.Filesystem.Mode = nsrun.HardRequirement
	}
	ns.AllowPtrace = pol.Stockade.AllowPtrace
	if uid, err := strconv.ParseUint(pol.Process.RunAsUser, 10, 32); err == nil {
		ns.RunAsUser = uint32(uid)
	}
	if gid, err := strconv.ParseUint(pol.Process.RunAsGroup, 10, 32); err == nil {
		ns.RunAsGroup = uint32(gid)
	}
	if sp.Unconfined {
		log.Warn().Msg("UNCONFINED: no seccomp filter, no cgroup (gateway run --bench-unconfined: benchmarks only)")
		ns.NoSeccomp = true
	}
	res := openResources(sp, dir, log)
	defer res.close()
	res.logStats = wlog.stats
	if res.group != nil {
		ns.Cgroup = res.group.Add
	}
	if sp.Limits.MemoryBytes > 0 {
		ns.TmpfsBytes = sp.Limits.MemoryBytes / 2 // each; charged to the sandbox's memory anyway
	}
	sb, stopped, err := startSandbox(ctx, func(ctx context.Context) (*nsrun.Sandbox, error) { return nsrun.Start(ctx, ns) }, sig)
	if reason, ok := nsrun.CannotStartReason(err); ok {
		return &CannotStartError{Reason: reason, Err: err}
	}
	if err != nil && stopped != nil {
		log.Info().Str("signal", stopped.String()).Err(err).Msg("stopped while the sandbox was starting")
		return nil
	}
	if err != nil {
		return fmt.Errorf("supervisor: start sandbox: %w", err)
	}
	defer sb.Close()
	res.started()
	for _, w := range sb.Warnings() {
		log.Warn().Str("landlock", w).Msg("filesystem policy (best effort)")
	}
	log.Info().Int("init_pid", sb.InitPid()).Int("workload_pid", sb.WorkloadPid()).Uint64("policy_version", version).Msg("sandbox started")

	gaveUp := make(chan string, 1)
	candidates := sb.Pids // every host process read: the fallback without a cgroup
	if res.group != nil {
		candidates = res.group.Procs // the sandbox's processes only, one small read
	}
	workdir := sp.Workdir
	if workdir == "" {
		workdir = nsrun.DefaultWorkdir
	}
	tamper := tamperPolicy(pol, workdir, pol.Stockade.AllowPtrace || sp.Unconfined)
	b, stopBoundary, err := startBoundary(sp, sb, candidates, tamper, engine, faults, log, o.logOut, func(kind string, reason any) {
		select {
		case gaveUp <- fmt.Sprintf("%s actor failed 10 times in 10 s (last: %v)", kind, reason):
		default:
		}
	})
	if err != nil {
		return err
	}
	defer stopBoundary()
	defer procs.Start(ctx, log, procs.WithWork(b.Stats().Work))() // as in boundary serve (internal/procs); stops before the boundary

	// The SSH server for exec and connect: one connection per relay stream;
	// its processes run inside the sandbox. The host key stays in the
	// sandbox's directory, stable across supervisor restarts.
	srv, err := sshd.New(sshd.Config{HostKeyPath: filepath.Join(dir, "ssh_host_ed25519_key"),
		Spawner: nsSpawner{sb}, Logger: log.With().Str("component", "sshd").Logger()})
	if err != nil {
		return fmt.Errorf("supervisor: ssh server: %w", err)
	}
	defer srv.Close()

	// The session: a remote endpoint of our own over mTLS (protoactor has
	// no client-only mode: it listens where the gateway can reach it, and
	// takes messages from gateway nodes only) and a session actor saying
	// Hello to the gateway.
	kp, err := trust.KeyPair([]byte(sp.Credentials.Cert), []byte(sp.Credentials.Key))
	if err != nil {
		return fmt.Errorf("supervisor: certificate: %w", err)
	}
	pool, err := trust.Pool([]byte(sp.Credentials.CA))
	if err != nil {
		return fmt.Errorf("supervisor: CA: %w", err)
	}
	ver := &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(trust.RoleGateway)}
	gateways := gatewayList(sp.GatewayList())
	if len(gateways) == 0 {
		return errors.New("supervisor: the spec names no gateway")
	}
	host, err := transport.LocalIPFor(gateways[0]) // the node that started us
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	sys := transport.NewActorSystem(logx.ActorSystemOption(log))
	rem, err := transport.Start(sys, transport.Config{Host: host, Cert: kp, Verifier: ver, Rules: transport.SupervisorRules(), Log: log})
	if err != nil {
		return fmt.Errorf("supervisor: %w", err)
	}
	defer func() { rem.Shutdown(false); sys.Shutdown() }()

	done := make(chan string, 2)
	exitDelivered := make(chan struct{})
	s := &session{
		log: log, gateways: gateways, chaos: sp.Chaos,
		relayTLS: trust.ClientConfig(kp, ver),
		hello: &messages.Hello{Sandbox: sp.Name, Instance: sp.Instance,
			SupervisorPid: int32(os.Getpid()), WorkloadPid: int32(sb.WorkloadPid()), PolicyVersion: version,
			HostKey: string(ssh.MarshalAuthorizedKey(srv.HostKey()))},
		restarts:  func() map[string]int64 { return restartCounts(b.Counters()) },
		resources: res.report,
		faults:    faults, ctx: ctx, relays: srv, policy: engine,
		refused:  func(why string) { done <- "gateway refused this instance: " + why },
		exitDone: func() { close(exitDelivered) },
	}
	sess, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
	if err != nil {
		return fmt.Errorf("supervisor: spawn session: %w", err)
	}
	cancelTick := scheduler.NewTimerScheduler(sys.Root).SendRepeatedly(heartbeatEvery, heartbeatEvery, sess, &tick{})
	defer cancelTick()
	go func() { // the boundary gave up: the gateway decides (Error/BoundaryFailed -> recovery)
		if why, ok := <-gaveUp; ok {
			sys.Root.Send(sess, &boundaryGaveUp{detail: why})
		}
	}()

	select {
	case <-sb.Done():
		st, werr := sb.Wait()
		msg := &messages.WorkloadExited{Sandbox: sp.Name, Instance: sp.Instance, Code: int32(st.Code)}
		if st.Signal != 0 {
			msg.Signal = st.Signal.String()
		}
		if werr != nil {
			msg.Code, msg.Signal = -1, werr.Error()
		}
		msg.Detail = res.oomDetail()
		log.Info().Str("status", st.String()).Msg("workload exited")
		sys.Root.Send(sess, &exited{msg: msg})
		select { // deliver the exit; a gateway that stays away learns of it as SupervisorLost
		case <-exitDelivered:
		case <-time.After(30 * time.Second):
			log.Warn().Msg("workload exit not acknowledged by the gateway within 30 s")
		case s := <-sig:
			log.Info().Str("signal", s.String()).Msg("stopping")
		}
		return nil
	case why := <-done:
		log.Warn().Str("why", why).Msg("supervisor ends")
		return nil
	case s := <-sig:
		log.Info().Str("signal", s.String()).Msg("stopping the sandbox")
		return nil
	}
}

// startSandbox starts the sandbox (bounded to 30 s); a stop signal that
// arrives meanwhile cancels the start (it is returned) or, when the start
// wins, is put back on sig for the caller's wait.
func startSandbox(ctx context.Context, start func(context.Context) (*nsrun.Sandbox, error), sig chan os.Signal) (*nsrun.Sandbox, os.Signal, error) {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stopped os.Signal // set by the watcher, read once it is done
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case stopped = <-sig:
			cancel()
		case <-done:
		}
	}()
	sb, err := start(startCtx)
	close(done)
	<-watched
	switch {
	case stopped == nil:
		return sb, nil, err
	case err == nil: // started after all: the caller's wait sees the stop
		select {
		case sig <- stopped:
		default: // another signal waits there already
		}
		return sb, nil, nil
	default:
		return nil, stopped, err
	}
}

// startBoundary serves the boundary on the sandbox's listeners. candidates
// lists the host pids of the sandbox's processes, the possible owners of a
// connection: from its cgroup when it has one (every process of the
// sandbox is in it, and none can leave it), else from its pid namespace.
func startBoundary(sp spec.Supervisor, sb *nsrun.Sandbox, candidates func() ([]int, error), tamper identity.TamperPolicy, engine *policy.Engine, faults fault.Injector, log zerolog.Logger, logOut audit.EventsWriter, onGiveUp func(string, any)) (*boundary.Boundary, func(), error) {
	px, udp, tcp, _ := sb.Listeners()
	diag, err := sb.DupDiagFD()
	if err != nil {
		return nil, nil, fmt.Errorf("supervisor: sock_diag socket: %w", err)
	}
	id, closeID, err := sandboxIdentity(diag, px, candidates, sb.InitPid(), tamper, faults, log)
	if err != nil {
		return nil, nil, err
	}
	up, res, err := boundary.Upstreams(sp.Hosts, sp.DNSUpstream)
	if err != nil {
		closeID()
		return nil, nil, fmt.Errorf("supervisor: %w (give the gateway --dns-upstream or --hosts)", err)
	}
	b, stop, err := boundary.Serve(boundary.Config{
		Proxy: px, DNSPacket: udp, DNSStream: tcp,
		Decider: boundary.PolicyDecider(engine), Identity: id, Resolver: res, DNSUpstream: up,
		AllowLoopback: sp.AllowLoopback, MaxConns: sp.MaxConns, Injector: faults,
		Log: log, LogOut: logOut, Counters: supervise.NewCounters(), Sandbox: sp.Name, OnGiveUp: onGiveUp,
	}, sp.AuditFile)
	if err != nil {
		closeID()
		return nil, nil, fmt.Errorf("supervisor: %w", err)
	}
	return b, func() {
		stop()
		closeID()
	}, nil
}

// sandboxIdentity makes the identity resolver of a sandbox's boundary:
// sock_diag through diag (a socket in the sandbox's network namespace),
// the sandbox's processes as the candidates, its init trusted and where
// ancestors stop, the sandbox's connects to the proxy recorded in the
// kernel where it allows (openConnectRecords), and its clients' mappings
// and tracers judged by tamper. Its close releases both and logs how the
// connections were identified.
func sandboxIdentity(diag int, px net.Listener, candidates func() ([]int, error), initPid int, tamper identity.TamperPolicy, faults fault.Injector, log zerolog.Logger) (*identity.Netlink, func(), error) {
	rec := openConnectRecords(diag, px, log)
	opts := []identity.Option{identity.WithDiagFD(diag), identity.WithPids(candidates), identity.WithStopAt(initPid), identity.WithTrusted(initPid),
		identity.WithInjector(faults), identity.WithTamperCheck(tamper)}
	if rec != nil {
		opts = append(opts, identity.WithConnectRecords(rec))
	}
	closeRec := func() {
		if rec != nil {
			_ = rec.Close()
		}
	}
	id, err := identity.NewNetlink(opts...)
	if err != nil {
		closeRec()
		return nil, nil, fmt.Errorf("supervisor: identity: %w", err)
	}
	if err := id.ProcEvents(); err != nil {
		log.Info().Err(err).Msg("identity: every lookup reads the processes it needs")
	}
	if err := id.QuietProcesses(); err != nil {
		log.Info().Err(err).Msg("identity: every connection reads every process of the sandbox")
	}
	return id, func() {
		_ = id.Close()
		closeRec()
		src := id.Sources() // the boundary has stopped: every lookup is counted
		log.Info().Bool("records", rec != nil).Uint64("from_records", src.Records).Uint64("through_sock_diag", src.SockDiag).
			Msg("identity: connections identified")
	}, nil
}

// openConnectRecords attaches a connect recorder for the sandbox's network
// namespace (the one the sock_diag socket diag was made in) and the proxy
// listener's port: every connect to the proxy in it is recorded with its
// socket's inode, and the program returns at once for the machine's other
// connects. It returns nil, and says why at info, when it cannot (no BPF,
// no cgroup v2 hierarchy, no BTF, a container): every lookup then asks
// sock_diag.
func openConnectRecords(diag int, proxy net.Listener, log zerolog.Logger) *connmap.Map {
	if proxy == nil {
		return nil // no proxy: no connect to identify
	}
	rec, err := recordSandboxConnects(diag, proxy)
	if err != nil {
		log.Info().Err(err).Msg("identity: the sandbox's connects are not recorded in the kernel; each lookup asks sock_diag")
		return nil
	}
	log.Info().Str("cgroup", rec.Cgroup()).Msg("identity: the sandbox's connects recorded in the kernel")
	if err := rec.ImageErr(); err != nil {
		log.Info().Err(err).Msg("identity: records do not say what the connecting process ran: an exec between a connect and its lookup at accept is not seen")
	}
	return rec
}

// tamperPolicy is what a sandbox's boundary judges its clients' mappings
// by, as the workload sees its files: read-only are the policy's
// read_only paths and the baseline's; writable the policy's read_write
// paths, the baseline's (a narrowing read_only entry notwithstanding: the
// workspace keeps what earlier runs and execs wrote, and the tmpfs
// mounts are the sandbox's own), /run (a tmpfs of the sandbox's) and,
// with include_workdir, the working directory. traceable: the workload
// may ptrace (stockade.allow_ptrace, or no seccomp filter), so each
// client's tracer is read at every connection.
func tamperPolicy(pol *policy.Policy, workdir string, traceable bool) identity.TamperPolicy {
	base := policy.Baseline()
	t := identity.TamperPolicy{ReadOnly: base.ReadOnly, Writable: append(base.ReadWrite, "/run"), TracerEveryCall: traceable}
	if fs := pol.Filesystem; fs != nil {
		t.ReadOnly = append(slices.Clone(fs.ReadOnly), t.ReadOnly...)
		t.Writable = append(slices.Clone(fs.ReadWrite), t.Writable...)
		if fs.IncludeWorkdir {
			t.Writable = append(t.Writable, workdir)
		}
	}
	return t
}

// recordSandboxConnects opens the recorder of openConnectRecords; one
// whose records carry no inode is closed: a sandbox's lookups cannot use
// them.
func recordSandboxConnects(diag int, proxy net.Listener) (*connmap.Map, error) {
	netns, err := unix.GetsockoptUint64(diag, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return nil, fmt.Errorf("netns cookie: %w", err)
	}
	port, err := connmap.PortOf(proxy.Addr())
	if err != nil {
		return nil, err
	}
	rec, err := connmap.Open(connmap.OnlyNetns(netns), connmap.OnlyPort(port))
	if err != nil {
		return nil, err
	}
	if err := rec.InodeErr(); err != nil {
		_ = rec.Close()
		return nil, err
	}
	return rec, nil
}

func restartCounts(c *supervise.Counters) map[string]int64 {
	out := map[string]int64{}
	for k, v := range c.Snapshot() {
		if k.Directive == "restart" {
			out[k.Kind] += v
		}
	}
	return out
}

// LockFile is the file in a sandbox's directory a running supervisor
// holds an exclusive lock on, and writes its pid to.
const LockFile = "supervisor.lock"

// lockSandbox takes the sandbox's supervisor lock: never two supervisors
// on one workspace, whatever the nodes that start them believe (a node
// that lost the sandbox while paused, in a cluster). The lock lives as
// long as the returned file stays open (it is not inherited by children).
func lockSandbox(dir, name string) (*os.File, error) {
	p := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("supervisor: lock %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(p)
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("supervisor: another supervisor of sandbox %s runs (pid %s): not starting a second one on its workspace", name, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("supervisor: lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
