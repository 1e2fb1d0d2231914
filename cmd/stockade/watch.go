package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
)

// watchPoll is how often `get -w` and `list -w` ask the gateway; each
// request is bounded by watchRequest.
const (
	watchPoll    = 300 * time.Millisecond
	watchRequest = 10 * time.Second
)

// watchHeader and watchFormat are the watch lines: fixed widths (a phase is
// at most 12 characters, a reason 17), so lines printed minutes apart line
// up without a table writer.
const (
	watchHeader = "TIME          NAME              PHASE         REASON             PIDS           MESSAGE"
	watchFormat = "%-12s  %-16s  %-12s  %-17s  %-13s  %s"
)

// watchLine is one line of a watch: the time seen (local), the sandbox,
// and its phase, reason, pids (supervisor/workload) and message.
func watchLine(at time.Time, st *messages.SandboxStatus) string {
	pids := "-"
	if st.SupervisorPid != 0 || st.WorkloadPid != 0 {
		pids = pidText(st.SupervisorPid) + "/" + pidText(st.WorkloadPid)
	}
	return fmt.Sprintf(watchFormat, at.Format(layoutClock), st.Name, st.Phase, dash(st.Reason), pids, dash(st.Message))
}

// watchGoneLine is the line of a sandbox that is gone (deleted).
func watchGoneLine(at time.Time, name string) string {
	return fmt.Sprintf(watchFormat, at.Format(layoutClock), name, "-", "-", "-", "deleted")
}

// watcher remembers what it printed last for each sandbox.
type watcher struct {
	out  io.Writer
	seen map[string]shown
}

// observe prints a line for each sandbox of list whose phase, reason,
// message or pids changed since the last call, and (all: list is every
// sandbox) one for each sandbox no longer listed.
func (w *watcher) observe(at time.Time, list []*messages.SandboxStatus, all bool) {
	here := map[string]bool{}
	for _, st := range list {
		here[st.Name] = true
		now := shownOf(st)
		now.attempts = 0 // not in a watch line: a change of it alone prints nothing
		if prev, ok := w.seen[st.Name]; ok && prev == now {
			continue
		}
		w.seen[st.Name] = now
		fmt.Fprintln(w.out, watchLine(at, st))
	}
	if !all {
		return
	}
	for _, name := range sortedKeys(w.seen) {
		if !here[name] {
			delete(w.seen, name)
			fmt.Fprintln(w.out, watchGoneLine(at, name))
		}
	}
}

// watch is `get NAME -w` (name set) and `list -w` (name ""): poll through
// one connection until SIGINT or SIGTERM (exit 0), a failed request (its
// exit code), or, for get, the sandbox's deletion (a last line, exit 0).
func (co *clientOpts) watch(cmd *cobra.Command, name string) error {
	c, err := co.dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return watchLoop(ctx, c, cmd.OutOrStdout(), name)
}

func watchLoop(ctx context.Context, c *client.Client, out io.Writer, name string) error {
	w := &watcher{out: out, seen: map[string]shown{}}
	fmt.Fprintln(out, watchHeader)
	tick := time.NewTicker(watchPoll)
	defer tick.Stop()
	for first := true; ; first = false {
		list, gone, err := poll(ctx, c, name)
		switch {
		case ctx.Err() != nil:
			return nil // interrupted: the end of a watch
		case gone && first:
			return err // no such sandbox: exit 3
		case gone:
			fmt.Fprintln(out, watchGoneLine(time.Now(), name))
			return nil
		case err != nil:
			return err
		}
		w.observe(time.Now(), list, name == "")
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// poll asks for one sandbox (name) or all (""), sorted by name; gone: the
// named sandbox does not exist (err says so).
func poll(ctx context.Context, c *client.Client, name string) (list []*messages.SandboxStatus, gone bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, watchRequest)
	defer cancel()
	if name != "" {
		reply, err := requestCtx(rctx, c, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_GET})
		if err != nil {
			return nil, errdefs.Is(err, errdefs.KindNotFound), err
		}
		return []*messages.SandboxStatus{reply.Sandbox}, false, nil
	}
	reply, err := requestCtx(rctx, c, &messages.ListRequest{})
	if err != nil {
		return nil, false, err
	}
	sortByName(reply.Sandboxes)
	return reply.Sandboxes, false, nil
}

func sortByName(list []*messages.SandboxStatus) {
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
}
