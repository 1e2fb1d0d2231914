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
		Use:   "run [--scenario NAME|all] [--seed N] [--duration D] [--faults N] [--report FILE]",
		Short: "Run a chaos scenario and check its invariants",
		Long: `Starts a private gateway (its own state dir, loopback ports) with sandboxes
doing steady work (execs, allowed and denied requests, DNS lookups, files
written to /sandbox), injects faults from a seeded schedule, then checks the
invariants: no sandbox lost or stuck, every acknowledged file intact, every
denial audited, every exec with its status or a clear error, no restarts
from connection-level faults, no leaked goroutines, processes or
namespaces. The same --seed replays the same schedule.

Scenarios: ` + strings.Join(names, ", ") + `.
Exit status: 0 all invariants held; 1 an invariant broke or the run failed.`,
		Example: `  sudo stockade chaos run
  sudo stockade chaos run --scenario error-recovery --seed 7 --faults 200 --report report.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	f.StringVar(&o.Scenario, "scenario", "all", "scenario: "+strings.Join(names, ", "))
	f.Uint64Var(&o.Seed, "seed", 1, "schedule seed (the same seed replays the same schedule)")
	f.DurationVar(&o.Duration, "duration", 2*time.Minute, "longest injection phase")
	f.IntVar(&o.Faults, "faults", 0, "end the injection phase after this many injected faults (0: run for --duration)")
	f.IntVar(&o.Sandboxes, "sandboxes", 4, "sandboxes doing steady work (the last two also take process-level faults)")
	f.DurationVar(&o.Settle, "settle", time.Minute, "how long sandboxes get to be Ready once the faults stop")
	f.StringVar(&o.Dir, "dir", "", "run directory (default: a temp dir, removed after a clean run)")
	f.StringVar(&report, "report", "", "write the report as JSON to this file")
	cmd.AddCommand(run)
	return cmd
}
