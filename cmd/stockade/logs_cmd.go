package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/messages"
)

// logSource is one log file of a sandbox, read from the gateway's state
// dir (the embedded default keeps logs on the gateway's host).
type logSource struct {
	path   string
	audit  bool // JSON audit events, shown in the one-line form
	prefix string
	off    int64
}

func newLogsCmd(co *clientOpts) *cobra.Command {
	var follow, auditOnly bool
	var tail int
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "logs NAME [--follow] [--audit] [--since D] [-n N]",
		Short: "Show a sandbox's workload output and boundary decisions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if _, err := co.call(cmd, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_GET}); err != nil {
				return err
			}
			dir := filepath.Join(co.stateDir, "sandboxes", name)
			srcs := []*logSource{{path: filepath.Join(dir, "audit.jsonl"), audit: true}, {path: filepath.Join(dir, "lifecycle.jsonl"), audit: true}}
			if !auditOnly {
				srcs = append([]*logSource{{path: filepath.Join(dir, "workload.log"), prefix: "out: "}}, srcs...)
			}
			var cutoff time.Time
			if since > 0 {
				cutoff = time.Now().Add(-since)
			}
			out := cmd.OutOrStdout()
			var events []logLine // audit and lifecycle, merged by time
			for _, s := range srcs {
				lines, err := s.read(cutoff)
				if err != nil {
					return &exitError{exitFailure, err}
				}
				if tail > 0 && len(lines) > tail {
					lines = lines[len(lines)-tail:]
				}
				if !s.audit {
					for _, l := range lines {
						fmt.Fprintln(out, l.text)
					}
					continue
				}
				events = append(events, lines...)
			}
			sort.SliceStable(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
			for _, l := range events {
				fmt.Fprintln(out, l.text)
			}
			for follow {
				time.Sleep(250 * time.Millisecond)
				for _, s := range srcs {
					lines, err := s.read(cutoff)
					if err != nil {
						return &exitError{exitFailure, err}
					}
					for _, l := range lines {
						fmt.Fprintln(out, l.text)
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	f.BoolVar(&auditOnly, "audit", false, "only the boundary's decisions and lifecycle events")
	f.IntVarP(&tail, "tail", "n", 0, "only the last N lines of each source (0: all)")
	f.DurationVar(&since, "since", 0, "only audit events newer than this (e.g. 10m)")
	return cmd
}

// logLine is one line to print; at is set for audit events.
type logLine struct {
	at   time.Time
	text string
}

// read returns the complete lines appended since the last read.
func (s *logSource) read(cutoff time.Time) ([]logLine, error) {
	f, err := os.Open(s.path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < s.off {
		s.off = 0 // rotated
	}
	if _, err := f.Seek(s.off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	var out []logLine
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // a partial last line waits for the next read
		}
		s.off += int64(len(line))
		line = strings.TrimRight(line, "\n")
		if !s.audit {
			out = append(out, logLine{text: s.prefix + line})
			continue
		}
		var e audit.Event
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		e.Time = time.UnixMilli(e.TimeMs)
		if !cutoff.IsZero() && e.Time.Before(cutoff) {
			continue
		}
		out = append(out, logLine{at: e.Time, text: e.Time.UTC().Format("15:04:05.000") + " " + e.Line()})
	}
	return out, nil
}
