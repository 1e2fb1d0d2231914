package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/chaos"
)

func newChaosCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "chaos",
		Short:   "Prove containment: seeded fault schedules against real gateway and supervisor processes",
		Example: `  sudo stockade chaos run --scenario all --duration 1m`,
	}
	var o chaos.Options
	var report string
	var names []string
	for _, s := range chaos.Scenarios() {
		names = append(names, s.Name)
	}
	run := &cobra.Command{
		Use:   "run [--cluster] [--scenario NAME|all] [--seed N] [--duration D] [--faults N] [--report FILE]",
		Short: "Run a chaos scenario and check its invariants",
		Long: `Starts a private gateway (its own state dir, loopback ports) with sandboxes
doing steady work (execs, allowed and denied requests, DNS lookups, files
written to /sandbox), injects faults from a seeded schedule, then checks the
invariants: no sandbox lost or stuck, every acknowledged file intact, every
denial audited, every exec with its status or a clear error, no restarts
from connection-level faults, no leaked goroutines, processes or
namespaces. The same --seed replays the same schedule.

--cluster runs 3 gateway nodes (n1..n3, one shared state dir) on a real etcd
the run starts (etcd-server's /usr/bin/etcd, loopback ports, data in the run
dir); each node reaches etcd through a proxy the run can cut. Its scenario
(default "cluster") adds node SIGKILL, node SIGSTOP past the lease TTL, etcd
SIGKILL and restart, and a node cut from etcd, and its invariants: one owner
per sandbox at every observed instant, one supervisor per sandbox, every
sandbox Ready under one node within 30 s of each node or etcd fault.

Scenarios: ` + strings.Join(names, ", ") + `.
Exit status: 0 all invariants held; 1 an invariant broke or the run failed.`,
		Example: `  sudo stockade chaos run
  sudo stockade chaos run --scenario error-recovery --seed 7 --faults 200 --report report.json
  sudo stockade chaos run --cluster --duration 10m --report cluster-report.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Cluster && !cmd.Flags().Changed("scenario") {
				o.Scenario = "cluster"
			}
			if _, err := chaos.ScenarioNamed(o.Scenario); err != nil {
				return &exitError{exitUsage, err}
			}
			bin, err := os.Executable()
			if err != nil {
				return &exitError{exitFailure, fmt.Errorf("chaos: find the stockade binary: %w", err)}
			}
			o.Binary, o.Progress = bin, cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := chaos.Run(ctx, o)
			if err != nil {
				return &exitError{exitFailure, err}
			}
			rep.WriteTable(cmd.OutOrStdout())
			if report != "" {
				b, err := json.MarshalIndent(rep, "", "  ")
				if err != nil {
					return &exitError{exitFailure, fmt.Errorf("chaos: encode report: %w", err)}
				}
				if err := os.WriteFile(report, append(b, '\n'), 0o644); err != nil {
					return &exitError{exitFailure, fmt.Errorf("chaos: write report: %w", err)}
				}
			}
			if !rep.OK() {
				return &exitError{exitFailure, fmt.Errorf("chaos: invariants broken (run dir kept: %s)", rep.Dir)}
			}
			return nil
		},
	}
	f := run.Flags()
	f.StringVar(&o.Scenario, "scenario", "all", "scenario: "+strings.Join(names, ", ")+" (with --cluster: cluster)")
	f.Uint64Var(&o.Seed, "seed", 1, "schedule seed (the same seed replays the same schedule)")
	f.DurationVar(&o.Duration, "duration", 2*time.Minute, "longest injection phase")
	f.IntVar(&o.Faults, "faults", 0, "end the injection phase after this many injected faults (0: run for --duration)")
	f.IntVar(&o.Sandboxes, "sandboxes", 4, "sandboxes doing steady work (the last two also take process-level faults)")
	f.DurationVar(&o.Settle, "settle", time.Minute, "how long sandboxes get to be Ready once the faults stop")
	f.StringVar(&o.Dir, "dir", "", "run directory (default: a temp dir, removed after a clean run)")
	f.StringVar(&report, "report", "", "write the report as JSON to this file")
	f.BoolVar(&o.Cluster, "cluster", false, "run 3 gateway nodes on a real etcd (needs etcd; default scenario: cluster)")
	f.DurationVar(&o.LeaseTTL, "lease-ttl", 2*time.Second, "cluster: the nodes' lease TTL (whole seconds, at least 2s)")
	cmd.AddCommand(run)
	return cmd
}
