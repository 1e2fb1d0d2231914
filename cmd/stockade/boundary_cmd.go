package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/stockade-dev/stockade/actors/boundary"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/boundary/identity/connmap"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/internal/procs"
	"github.com/stockade-dev/stockade/internal/sysmon"
	"github.com/stockade-dev/stockade/policy"
)

// --connect-records values.
const (
	recordsAuto = "auto"
	recordsOff  = "off"
)

// openConnectRecords attaches the connect recorder for the connects to the
// proxy listener's port, or says at info why not (nil: every lookup asks
// sock_diag and /proc, as --connect-records off does; no proxy, nothing to
// record).
func openConnectRecords(proxy net.Listener, log zerolog.Logger) *connmap.Map {
	if proxy == nil {
		return nil
	}
	port, err := connmap.PortOf(proxy.Addr())
	if err != nil {
		log.Info().Err(err).Msg("identity: connects are not recorded in the kernel; each lookup asks sock_diag and /proc")
		return nil
	}
	rec, err := connmap.Open(connmap.OnlyPort(port))
	if err != nil {
		log.Info().Err(err).Msg("identity: connects are not recorded in the kernel; each lookup asks sock_diag and /proc")
		return nil
	}
	log.Info().Str("cgroup", rec.Cgroup()).Msg("identity: connects recorded in the kernel (--connect-records off to stop)")
	if err := rec.ImageErr(); err != nil {
		log.Info().Err(err).Msg("identity: records do not say what the connecting process ran: an exec between a connect and its lookup at accept is not seen")
	}
	return rec
}

// checkIdentityMode refuses an --identity value other than netlink and
// none.
func checkIdentityMode(mode string) error {
	if mode != identity.ModeNetlink && mode != identity.ModeNone {
		return fmt.Errorf("--identity %q: want %s or %s", mode, identity.ModeNetlink, identity.ModeNone)
	}
	return nil
}

func newBoundaryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "boundary", Short: "The egress boundary (HTTP proxy + DNS) on its own"}
	cmd.AddCommand(newBoundaryServeCmd())
	return cmd
}

type serveOpts struct {
	policyFile    string
	proxyAddr     string
	dnsAddr       string
	hostsFile     string
	dnsUpstream   string
	auditFile     string
	identityMode  string
	records       string
	allowLoopback bool
	maxConns      int
	faults        []string
	metricsAddr   string
	cpuProfile    string
	memProfile    string
	readyFile     string
}

func newBoundaryServeCmd() *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve --policy FILE",
		Short: "Serve a standalone egress boundary any process can use through HTTP(S)_PROXY",
		Long: `Serve an HTTP proxy (CONNECT and absolute-URI forwarding) and a DNS server
(UDP and TCP on one port) that decide every request by the policy.

Point a client at it with HTTPS_PROXY=http://ADDR HTTP_PROXY=http://ADDR and
dig @HOST -p PORT. SIGHUP reloads the policy file (a bad file is refused and
the running version stays). Audit events go to --audit as JSON lines and to
the log as one line each.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBoundary(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.policyFile, "policy", "", "policy file (OpenShell v1 YAML); required")
	f.StringVar(&o.proxyAddr, "proxy", "127.0.0.1:3128", "HTTP proxy listen address (empty: no proxy)")
	f.StringVar(&o.dnsAddr, "dns", "127.0.0.1:5353", "DNS listen address, UDP and TCP (empty: no DNS)")
	f.StringVar(&o.hostsFile, "hosts", "", "static names (/etc/hosts format) answering allowed names offline; also resolves proxy targets")
	f.StringVar(&o.dnsUpstream, "dns-upstream", "", "upstream DNS server HOST:PORT (default: the nameservers of /etc/resolv.conf)")
	f.StringVar(&o.auditFile, "audit", "", "audit file (JSON lines, rotated); empty: log only")
	f.StringVar(&o.identityMode, "identity", identity.ModeNetlink, "peer identity: netlink (sock_diag + /proc) or none (endpoint-only, binaries ignored)")
	f.StringVar(&o.records, "connect-records", recordsAuto, "with --identity netlink: auto records each TCP connect's process in the kernel (a BPF program on the cgroup v2 root; needs root), off: sock_diag + /proc only")
	f.BoolVar(&o.allowLoopback, "allow-loopback-upstream", false, "allow upstreams on loopback addresses (tests and local demos)")
	f.IntVar(&o.maxConns, "max-conns", 1024, "concurrent mediated connections and DNS queries in flight (over it: 503 / REFUSED, audited)")
	f.StringArrayVar(&o.faults, "fault", nil, "inject a fault, POINT=KIND[:COUNT] (testing; e.g. identity.lookup=panic)")
	f.StringVar(&o.metricsAddr, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9464); empty: off")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile to this file until the boundary stops (benchmarks)")
	f.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile to this file when the boundary stops (benchmarks)")
	f.StringVar(&o.readyFile, "ready-file", "", "once serving, write this file (JSON: proxy, dns, metrics, pid); removed when the boundary stops")
	_ = f.MarkHidden("fault")
	_ = f.MarkHidden("cpuprofile")
	_ = f.MarkHidden("memprofile")
	_ = cmd.MarkFlagRequired("policy")
	return cmd
}

func newLogger(cmd *cobra.Command) zerolog.Logger {
	log, _ := newLog(cmd)
	return log
}

// newLog is newLogger with its destination, for a boundary whose log sink
// writes a batch of decision lines at once.
func newLog(cmd *cobra.Command) (zerolog.Logger, *logx.Out) {
	return newLogTo(cmd, os.Stderr)
}

// newLogTo is newLog writing to w (stderr, or a file the process rotates).
func newLogTo(cmd *cobra.Command, w io.Writer) (zerolog.Logger, *logx.Out) {
	level, _ := cmd.Flags().GetString("log-level")
	format, _ := cmd.Flags().GetString("log-format")
	pretty := format == "console" || (format == "auto" && term.IsTerminal(int(os.Stderr.Fd())))
	out := logx.NewOut(w, pretty)
	return logx.NewOn(out, level), out
}

// newBoundaryLog is newLog for a process that runs a boundary (`boundary
// serve`, a supervisor); call it first of all. It first runs the process
// again, as this same process, with Go's monitor thread kept out of deep
// sleep (internal/sysmon says why and how to opt out), before anything an
// exec would drop (signal handlers, files, listeners); it returns only
// when there was nothing to do or the exec failed, which it logs.
func newBoundaryLog(cmd *cobra.Command) (zerolog.Logger, *logx.Out) {
	log, out, _ := newBoundaryLogTo(cmd, func() (io.Writer, error) { return os.Stderr, nil })
	return log, out
}

// newBoundaryLogTo is newBoundaryLog writing to what open returns, called
// after the exec (which would drop what it opened); its error is returned.
func newBoundaryLogTo(cmd *cobra.Command, open func() (io.Writer, error)) (zerolog.Logger, *logx.Out, error) {
	err := sysmon.Reexec()
	w, oerr := open()
	if oerr != nil {
		return zerolog.Logger{}, nil, oerr
	}
	log, out := newLogTo(cmd, w)
	if err != nil {
		log.Warn().Err(err).Msg("running with Go's default monitor thread")
	}
	return log, out, nil
}

func runBoundary(cmd *cobra.Command, o serveOpts) error {
	log, logOut := newBoundaryLog(cmd)
	// Signals are handled from before "ready" (whoever saw the ready file
	// may send SIGHUP or SIGTERM at once) and until every deferred close
	// has run: a second SIGTERM or ^C during the shutdown must not end
	// the process before the audit file is flushed.
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	if o.proxyAddr == "" && o.dnsAddr == "" {
		return &exitError{exitUsage, errors.New("boundary serve: --proxy and --dns are both empty; nothing to serve")}
	}
	if o.records != recordsAuto && o.records != recordsOff {
		return &exitError{exitUsage, fmt.Errorf("--connect-records %q: want %s or %s", o.records, recordsAuto, recordsOff)}
	}
	if err := checkIdentityMode(o.identityMode); err != nil {
		return &exitError{exitUsage, err}
	}

	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("cpuprofile: %w", err)}
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return &exitError{exitFailure, fmt.Errorf("cpuprofile: %w", err)}
		}
		defer func() { pprof.StopCPUProfile(); _ = pf.Close() }()
	}
	if o.memProfile != "" {
		mf, err := os.Create(o.memProfile)
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("memprofile: %w", err)}
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
				log.Warn().Err(err).Msg("memprofile not written")
			}
			_ = mf.Close()
		}()
	}

	inj := fault.NewSet()
	for _, s := range o.faults {
		if _, err := inj.Apply(s); err != nil {
			return &exitError{exitUsage, err}
		}
		log.Warn().Str("rule", s).Msg("fault injection armed")
	}

	engine := policy.NewEngine(policy.WithFaults(inj), policy.WithLogger(log))
	if err := loadPolicy(engine, o.policyFile, log); err != nil {
		return &exitError{exitUsage, err}
	}

	up, res, err := boundary.Upstreams(o.hostsFile, o.dnsUpstream)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("%w (or pass --dns-upstream or --hosts)", err)}
	}

	cfg := boundary.Config{
		Decider: boundary.PolicyDecider(engine), Resolver: res, DNSUpstream: up,
		AllowLoopback: o.allowLoopback, MaxConns: o.maxConns, Injector: inj, Log: log, LogOut: logOut,
		Counters: supervise.NewCounters(),
	}
	closers, err := listen(&cfg, o.proxyAddr, o.dnsAddr)
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	if err != nil {
		return &exitError{exitFailure, err}
	}
	var resolver identity.Resolver
	collectors := []prometheus.Collector{}
	switch o.identityMode {
	case identity.ModeNetlink:
		idOpts := []identity.Option{identity.WithInjector(inj)}
		if o.records == recordsAuto {
			if rec := openConnectRecords(cfg.Proxy, log); rec != nil {
				defer rec.Close()
				idOpts = append(idOpts, identity.WithConnectRecords(rec))
			}
		}
		nl, err := identity.NewNetlink(idOpts...)
		if err != nil {
			return &exitError{exitFailure, fmt.Errorf("identity: %w (use --identity none for endpoint-only matching)", err)}
		}
		defer nl.Close()
		if err := nl.ProcEvents(); err != nil {
			log.Info().Err(err).Msg("identity: every lookup reads the processes it needs")
		} else {
			log.Debug().Msg("identity: process events vouch for the processes met before")
		}
		resolver = nl
		collectors = append(collectors, boundary.IdentitySources(nl.Sources))
	default: // identity.ModeNone: checkIdentityMode refused any other value with the flags
		resolver = identity.None{}
		log.Warn().Msg("identity none: endpoint-only matching, policy binaries are ignored")
	}

	cfg.Identity = resolver
	gaveUp := make(chan string, 1)
	cfg.OnGiveUp = func(kind string, reason any) {
		select {
		case gaveUp <- fmt.Sprintf("%s actor failed 10 times in 10 s (last: %v)", kind, reason):
		default:
		}
	}

	b, stopBoundary, err := boundary.Serve(cfg, o.auditFile)
	if err != nil {
		return &exitError{exitFailure, err}
	}
	defer stopBoundary()
	// One processor for Go code while connections come one at a time, all
	// of them under parallel load (internal/procs); GOMAXPROCS in the
	// environment turns it off.
	defer procs.Start(context.Background(), log, procs.WithWork(b.Stats().Work))()
	ready := boundaryReady{PID: os.Getpid()}
	if o.metricsAddr != "" {
		bound, stop, err := serveMetrics(o.metricsAddr, log, append(collectors, b.Counters(), b.Stats())...)
		if err != nil {
			return &exitError{exitFailure, err}
		}
		defer stop()
		ready.Metrics = bound
	}
	ev := log.Info().Uint64("policy_version", engine.Version()).Str("identity", resolver.Mode()).Str("dns_upstream", fmt.Sprint(up))
	if cfg.Proxy != nil {
		ready.Proxy = cfg.Proxy.Addr().String()
		ev = ev.Str("proxy", ready.Proxy)
	}
	if cfg.DNSPacket != nil {
		ready.DNS = cfg.DNSPacket.LocalAddr().String()
		ev = ev.Str("dns", ready.DNS)
	}
	ev.Msg("boundary ready")
	if o.readyFile != "" {
		if err := writeReadyFile(o.readyFile, ready); err != nil {
			return &exitError{exitFailure, err}
		}
		defer func() { _ = os.Remove(o.readyFile) }()
	}
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				if err := loadPolicy(engine, o.policyFile, log); err != nil {
					log.Error().Err(err).Uint64("policy_version", engine.Version()).Msg("policy reload refused; the running version stays")
				}
				continue
			}
			log.Info().Str("signal", s.String()).Str("directives", b.Counters().String()).Msg("boundary stopping")
			return nil
		case why := <-gaveUp:
			return &exitError{exitFailure, fmt.Errorf("boundary gave up: %s", why)}
		}
	}
}

// loadPolicy reads and loads a policy file into the engine, logging the new
// version or returning every error of the file.
func loadPolicy(engine *policy.Engine, file string, log zerolog.Logger) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read policy: %w", err)
	}
	v, err := engine.Load(file, data)
	if err != nil {
		return err
	}
	log.Info().Str("file", file).Uint64("policy_version", v).Msg("policy loaded")
	return nil
}

// listen opens the proxy and DNS listeners; the returned closers close
// them (the boundary actors never do).
func listen(cfg *boundary.Config, proxyAddr, dnsAddr string) ([]func() error, error) {
	var closers []func() error
	if proxyAddr != "" {
		// No keep-alive on clients' connections: a client is a process of
		// this machine, whose exit the kernel reports at once; probes
		// would only cost 4 setsockopt calls per connection.
		ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(context.Background(), "tcp", proxyAddr)
		if err != nil {
			return closers, fmt.Errorf("proxy listen %s: %w", proxyAddr, err)
		}
		closers = append(closers, ln.Close)
		cfg.Proxy = ln
	}
	if dnsAddr != "" {
		pc, ln, err := boundary.ListenDNS(dnsAddr)
		if err != nil {
			return closers, err
		}
		closers = append(closers, pc.Close, ln.Close)
		cfg.DNSPacket, cfg.DNSStream = pc, ln
	}
	return closers, nil
}

// serveMetrics serves /metrics with the given collectors until stop is
// called; bound is the address it listens on.
func serveMetrics(addr string, log zerolog.Logger, cs ...prometheus.Collector) (bound string, stop func(), err error) {
	return serveMetricsMux(addr, log, false, cs...)
}

// serveMetricsMux is serveMetrics; with goroutines (a gateway run with
// --chaos only) it also serves /debug/goroutines, every goroutine's
// stack grouped (what the chaos harness keeps when its leak check fails).
func serveMetricsMux(addr string, log zerolog.Logger, goroutines bool, cs ...prometheus.Collector) (bound string, stop func(), err error) {
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return "", nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if goroutines {
		mux.HandleFunc("/debug/goroutines", func(w http.ResponseWriter, _ *http.Request) {
			_ = pprof.Lookup("goroutine").WriteTo(w, 1)
		})
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("metrics server")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("metrics serving")
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// boundaryReady is the content of `boundary serve --ready-file` (README.md,
// "Readiness"); an address is omitted when that service is off.
type boundaryReady struct {
	Proxy   string `json:"proxy,omitempty"`
	DNS     string `json:"dns,omitempty"`
	Metrics string `json:"metrics,omitempty"`
	PID     int    `json:"pid"`
}

// writeReadyFile writes v as one JSON object to path atomically: a
// temporary file in the same directory, mode 0644, renamed over path, so a
// reader sees no file or the whole one. A file a killed process left is
// replaced; its pid tells the two apart.
func writeReadyFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("--ready-file %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("--ready-file %s: %w (the directory must be writable by this user)", path, err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("--ready-file %s: %w", path, err)
	}
	return nil
}
