package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/messages"
)

// newLogsCmd is `sandbox logs`: the gateway streams the logs (the node
// that owns the sandbox serves them); nothing is read from local files.
func newLogsCmd(co *clientOpts) *cobra.Command {
	var follow, auditOnly, timestamps bool
	var tail int
	var since time.Duration
	var output string
	cmd := &cobra.Command{
		Use:   "logs NAME [-f] [--audit] [--since D] [-n N] [-o text|json] [--timestamps]",
		Short: "Show a sandbox's workload output (out: and err:), boundary decisions and lifecycle events, in time order",
		Long: `Show a sandbox's logs, as the gateway serves them: the workload's output
(stdout lines labelled out:, stderr err:), the boundary's decisions and the
sandbox's lifecycle events, merged in time order. Only the current creation
of NAME is shown (a sandbox deleted and created again starts empty).

-n N shows the last N lines of the merged result; --since D the lines of
the last D; -f keeps printing what is written later, until interrupted or
the sandbox is deleted. Each line starts with its time (with the date when
it is older than today, full RFC 3339 with --timestamps). -o json prints
one JSON object per line: time, source (workload, audit, lifecycle),
stream (out, err: workload only), text, event (audit, lifecycle).`,
		Example: `  stockade sandbox logs demo
  stockade sandbox logs demo -f --since 10m
  stockade sandbox logs demo --audit -n 50
  stockade sandbox logs demo -o json | jq -r 'select(.source == "audit") | .text'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeFirstSandboxName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return &exitError{exitUsage, fmt.Errorf("-o %q: use text or json", output)}
			}
			if tail < 0 || tail > logs.MaxTail {
				return &exitError{exitUsage, fmt.Errorf("-n %d: use 0 (all) to %d", tail, logs.MaxTail)}
			}
			if since < 0 {
				return &exitError{exitUsage, fmt.Errorf("--since %s: use a positive duration, e.g. 10m", since)}
			}
			req := &messages.LogsRequest{Name: args[0], Follow: follow, AuditOnly: auditOnly, Tail: int32(tail)}
			if since > 0 {
				req.SinceUnixMs = time.Now().Add(-since).UnixMilli()
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := bufio.NewWriter(cmd.OutOrStdout())
			err = c.Logs(ctx, req, func(b *messages.LogsBatch) error {
				now := time.Now()
				for _, pe := range b.Entries {
					e := logs.Entry{Time: time.UnixMilli(pe.TimeUnixMs), Source: pe.Source, Stream: pe.Stream, Text: pe.Text, Event: pe.Event}
					if output == "json" {
						line, err := logs.JSON(e)
						if err != nil {
							return err
						}
						_, _ = out.Write(append(line, '\n'))
						continue
					}
					_, _ = out.WriteString(logs.Format(e, now, timestamps) + "\n")
				}
				if err := out.Flush(); err != nil {
					return fmt.Errorf("logs: write: %w", err)
				}
				if b.End && b.Message != "" && b.Status == messages.Status_STATUS_OK {
					fmt.Fprintln(cmd.ErrOrStderr(), "stockade:", b.Message)
				}
				return nil
			})
			var kind *errdefs.Error
			switch {
			case err == nil, ctx.Err() != nil && errors.Is(err, ctx.Err()):
				return nil // done, or interrupted
			case errors.As(err, &kind):
				return &exitError{errdefs.ExitCode(kind.Kind), err}
			case errors.Is(err, client.ErrUnreachable), errors.Is(err, client.ErrRefused):
				return &exitError{exitUnreachable, err}
			default:
				return &exitError{exitFailure, err}
			}
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted (or the sandbox is deleted)")
	f.BoolVar(&auditOnly, "audit", false, "only the boundary's decisions and lifecycle events")
	f.IntVarP(&tail, "tail", "n", 0, "only the last N lines of the merged result (0: all)")
	f.DurationVar(&since, "since", 0, "only lines newer than this (e.g. 10m), from every source")
	f.StringVarP(&output, "output", "o", "text", "text or json (one object per line)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	f.BoolVar(&timestamps, "timestamps", false, "full RFC 3339 times with milliseconds and zone")
	return cmd
}
