package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/actors/gateway"
	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/cluster"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/logfile"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/supervisor"
	"github.com/stockade-dev/stockade/transport"
)

func newGatewayCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "gateway", Short: "A gateway node: sandboxes, their state and the API"}
	var cfg gateway.Config
	var faultRules []string
	var chaos bool
	var metricsAddr, readyFile, etcd, uidPool string
	var etcdTLS etcdTLSFiles
	run := &cobra.Command{
		Use:   "run",
		Short: "Run a gateway on the embedded default (bbolt state, process driver)",
		Long: `Run a gateway: the API for clients on --listen (127.0.0.1:7420), state in
bbolt under --state-dir, one supervisor process per sandbox. Sandboxes keep
running when the gateway stops; the next gateway re-adopts them. SSH relays
(exec, connect) listen on --relay-listen: by default the --listen host on a
free port, which clients and supervisors are told with every relay.

Every endpoint is mutual TLS 1.3 under a CA the gateway creates on first
start in <state-dir>/pki (keys 0600; the gateway refuses to start when a key
is readable by others). It writes <state-dir>/client.config for the local
operator (an admin client); other users and hosts get theirs, with a role,
from 'stockade client issue'.

As root, each sandbox runs as its own range of 65,536 host uids and gids
from --uid-pool (kept in its record across restarts); the gateway refuses a
pool that overlaps /etc/subuid, /etc/subgid or a user's or group's id.
Unprivileged, a sandbox maps only the gateway's own uid and gid.

A cluster: --etcd URL[,URL] --node NAME joins the nodes that share that etcd.
State, membership and ownership live in etcd; each sandbox is driven by one
live node, and a lost node's sandboxes move to another node of their host
within seconds (their supervisors and workloads keep running). Every node
needs the cluster's CA in <state-dir>/pki (stockade cluster init DIR); the
nodes of one host share its --state-dir (the sandboxes' files).`,
		Example: `  stockade gateway run
  stockade gateway run --listen 127.0.0.1:7420 --state-dir /var/lib/stockade
  stockade cluster init /tmp/cluster-ca   # the CA, and etcd's TLS in /tmp/cluster-ca/etcd
  stockade gateway run --etcd https://127.0.0.1:2379 --etcd-cacert /tmp/cluster-ca/etcd/ca.crt \
    --etcd-cert /tmp/cluster-ca/etcd/client.crt --etcd-key /tmp/cluster-ca/etcd/client.key --node n1 --listen 127.0.0.1:7421`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = newLogger(cmd)
			if etcd != "" {
				for _, u := range strings.Split(etcd, ",") {
					if u = strings.TrimSpace(u); u != "" {
						cfg.Etcd = append(cfg.Etcd, u)
					}
				}
				if !cmd.Flags().Changed("node") {
					return &exitError{exitUsage, errors.New("--etcd needs --node NAME: each node of a cluster has its own name")}
				}
				tc, err := etcdTLS.config(cfg.Etcd)
				if err != nil {
					return &exitError{exitUsage, err}
				}
				cfg.EtcdTLS = tc
			}
			if cmd.Flags().Changed("uid-pool") {
				p, err := idrange.Parse(uidPool)
				if err == nil {
					err = idrange.CheckPool(p)
				}
				if err != nil {
					return &exitError{exitUsage, fmt.Errorf("--uid-pool: %w", err)}
				}
				cfg.IDPool = p
			}
			if chaos || len(faultRules) > 0 {
				cfg.Faults = fault.NewSet()
			}
			for _, r := range faultRules {
				if _, err := cfg.Faults.Apply(r); err != nil {
					return &exitError{exitUsage, err}
				}
				cfg.Log.Warn().Str("rule", r).Msg("gateway fault armed")
			}
			cfg.Counters, cfg.Refused, cfg.Chaos = supervise.NewCounters(), transport.NewRefusals(), chaos
			var metricsBound string
			if metricsAddr != "" {
				cs := []prometheus.Collector{cfg.Counters, cfg.Refused, collectors.NewGoCollector()}
				if len(cfg.Etcd) > 0 {
					cfg.ClusterStats = cluster.NewStats()
					cs = append(cs, cfg.ClusterStats)
				}
				bound, stopMetrics, err := serveMetricsMux(metricsAddr, cfg.Log, chaos, cs...)
				if err != nil {
					return &exitError{exitFailure, err}
				}
				defer stopMetrics()
				metricsBound = bound
			}
			if readyFile != "" {
				wrote := false // remove only our own file, not one of a gateway this one failed to replace
				cfg.Ready = func(s gateway.Served) error {
					err := writeReadyFile(readyFile, gatewayReady{API: s.API, Relay: s.Relay, Metrics: metricsBound, StateDir: s.StateDir, PID: os.Getpid()})
					wrote = err == nil
					return err
				}
				defer func() {
					if wrote {
						_ = os.Remove(readyFile)
					}
				}()
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := gateway.Run(ctx, cfg); err != nil {
				return &exitError{exitFailure, err}
			}
			return nil
		},
	}
	f := run.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", client.DefaultStateDir(), "state directory (bbolt file, CA, client config, workspaces)")
	f.StringVar(&cfg.Listen, "listen", client.DefaultGateway, "API address")
	f.StringVar(&cfg.RelayListen, "relay-listen", "", "SSH relay address (clients and supervisors connect here; they are told it); empty: the --listen host, a free port chosen at start")
	f.StringVar(&cfg.Hosts, "hosts", "", "static names (/etc/hosts format) for the sandboxes' DNS and proxy (offline use)")
	f.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "upstream DNS server HOST:PORT for the sandboxes (default: /etc/resolv.conf)")
	f.BoolVar(&cfg.AllowLoopback, "allow-loopback-upstream", false, "let sandboxes reach upstreams on loopback (tests, make run)")
	f.IntVar(&cfg.MaxConns, "max-conns", 1024, "per sandbox: concurrent mediated connections and DNS queries in flight (over it: 503 / REFUSED, audited)")
	f.IntVar(&cfg.MaxSandboxesPerClient, "max-sandboxes-per-client", sandbox.DefaultMaxSandboxesPerClient, "most sandboxes one operator client may have created at once (admins: no quota; -1: no quota)")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics (directives, Go runtime) on this address, e.g. 127.0.0.1:9465; empty: off")
	f.StringVar(&etcd, "etcd", "", "join a cluster: etcd client URLs, comma-separated (state, membership and ownership in etcd; needs --node)")
	f.StringVar(&cfg.Node, "node", "local", "this node's name (unique in a cluster)")
	f.StringVar(&cfg.Host, "host-id", "", "cluster: this machine's name (default: the hostname); nodes of one host share its sandboxes")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "cluster: the node's etcd lease TTL, whole seconds >= 2 (default 3s): a lost node's sandboxes move after about this long")
	f.StringVar(&etcdTLS.ca, "etcd-cacert", "", "cluster: CA bundle that signs etcd's server certificate (https endpoints)")
	f.StringVar(&etcdTLS.cert, "etcd-cert", "", "cluster: this node's client certificate for etcd (with --etcd-key; when etcd requires client certificates)")
	f.StringVar(&etcdTLS.key, "etcd-key", "", "cluster: the key of --etcd-cert (mode 0600)")
	f.BoolVar(&etcdTLS.insecure, "etcd-insecure", false, "cluster: accept http:// etcd endpoints (anyone who reaches etcd can rewrite every sandbox; tests and an etcd only you can reach)")
	f.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "", "cluster: the prefix of every key (default /stockade/; several clusters on one etcd)")
	f.StringVar(&uidPool, "uid-pool", idrange.DefaultPool().String(), "as root: the host uids/gids FIRST-LAST each sandbox's own range of 65,536 is taken from (on 65,536 boundaries, below 2^31, clear of /etc/subuid, /etc/subgid and every user's and group's id)")
	f.StringVar(&readyFile, "ready-file", "", "once serving, write this file (JSON: api, relay, metrics, state_dir, pid); removed when the gateway stops")
	// Test and chaos knobs: hidden, documented in ARCHITECTURE.md.
	f.StringArrayVar(&faultRules, "fault", nil, "arm a gateway fault POINT=KIND[:COUNT][@SKIP] (store.write, store.committed, supervisor.start)")
	f.BoolVar(&cfg.Unconfined, "bench-unconfined", false, "sandboxes without seccomp and cgroup (benchmarks of their cost only)")
	f.BoolVar(&chaos, "chaos", false, "accept fault requests at run time, for the gateway and every supervisor (sandbox fault)")
	f.Float64Var(&cfg.Lifecycle.BackoffScale, "backoff-scale", 1, "multiply recovery backoff delays")
	f.DurationVar(&cfg.Lifecycle.Grace, "session-grace", 0, "how long a lost session may reconnect before the supervisor is respawned (default 20s)")
	f.DurationVar(&cfg.Lifecycle.StartTimeout, "start-timeout", 0, "how long a start may take to bring the session up (default 30s)")
	f.DurationVar(&cfg.Lifecycle.StableAfter, "stable-after", 0, "how long Ready must last to reset the recovery attempt count (default 30s)")
	for _, n := range []string{"fault", "chaos", "bench-unconfined", "backoff-scale", "session-grace", "start-timeout", "stable-after"} {
		_ = f.MarkHidden(n)
	}
	cmd.AddCommand(run)
	return cmd
}

// gatewayReady is the content of `gateway run --ready-file` (README.md,
// "Readiness"); metrics is omitted without --metrics.
type gatewayReady struct {
	API      string `json:"api"`
	Relay    string `json:"relay"`
	Metrics  string `json:"metrics,omitempty"`
	StateDir string `json:"state_dir"`
	PID      int    `json:"pid"`
}

// newSupervisorLog is newBoundaryLog for a supervisor whose log is the
// file path (its supervisor.log), rotated at supervisor.LogMaxBytes
// keeping supervisor.LogKeep: stdout and stderr are made that file, at
// start and at each rotation, so that the runtime's crash report and the
// last line the process prints (which the gateway's driver reads) are in
// the current file. An empty path logs to stderr.
func newSupervisorLog(cmd *cobra.Command, path string) (zerolog.Logger, *logx.Out, error) {
	if path == "" {
		log, out := newBoundaryLog(cmd)
		return log, out, nil
	}
	return newBoundaryLogTo(cmd, func() (io.Writer, error) {
		f, err := logfile.OpenRotating(path, supervisor.LogMaxBytes, supervisor.LogKeep, int(os.Stdout.Fd()), int(os.Stderr.Fd()))
		if err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		return f, nil
	})
}

func newSupervisorCmd() *cobra.Command {
	var specPath, logFile string
	cmd := &cobra.Command{
		Use:    "supervisor --spec FILE [--log-file FILE]",
		Short:  "Run one sandbox (started by a gateway's driver)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, logOut, err := newSupervisorLog(cmd, logFile)
			if err != nil {
				return &exitError{exitFailure, err}
			}
			if err := supervisor.Run(context.Background(), specPath, log, supervisor.WithLogOut(logOut)); err != nil {
				// A sandbox that cannot start: a status of its own, so the
				// gateway does not retry (contract.ExitSupervisorCannotStart).
				var cs *supervisor.CannotStartError
				if errors.As(err, &cs) {
					return &exitError{contract.ExitSupervisorCannotStart, err}
				}
				return &exitError{exitFailure, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&specPath, "spec", "", "the spec file the gateway wrote")
	cmd.Flags().StringVar(&logFile, "log-file", "", "log to this file, rotated by size (stdout and stderr too); empty: stderr")
	_ = cmd.MarkFlagRequired("spec")
	return cmd
}
