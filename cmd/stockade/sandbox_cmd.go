package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/trust"
)

type clientOpts struct {
	gateway  string
	stateDir string
	config   string
}

// addClientFlags adds the flags every gateway client takes.
func (co *clientOpts) addClientFlags(f *pflag.FlagSet) {
	f.StringVar(&co.gateway, "gateway", os.Getenv("STOCKADE_GATEWAY"), "gateway address(es), comma-separated (or STOCKADE_GATEWAY; default: the config's, else "+client.DefaultGateway+")")
	f.StringVar(&co.config, "config", "", "client configuration file (or STOCKADE_CONFIG; default ~/.config/stockade/config, then the state dir's client.config)")
	f.StringVar(&co.stateDir, "state-dir", client.DefaultStateDir(), "the local gateway's state dir (its client.config)")
}

func newSandboxCmd() *cobra.Command {
	var co clientOpts
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create and manage sandboxes on a gateway",
		Example: `  stockade sandbox create demo --policy examples/policy.yaml -- /bin/sh -c 'exec sleep 1000'
  stockade sandbox ls
  stockade sandbox get demo -w
  stockade sandbox exec demo -- curl -s https://api.github.com/zen
  stockade sandbox rm demo`,
	}
	co.addClientFlags(cmd.PersistentFlags())
	cmd.AddCommand(newCreateCmd(&co), newGetCmd(&co), newListCmd(&co), newLogsCmd(&co),
		newExecCmd(&co), newSSHProxyCmd(&co), newSSHConfigCmd(&co), newConnectCmd(&co), newFaultCmd(&co),
		newVerbCmd(&co, "stop NAME [--force] [--no-wait] [--timeout D]", "Stop a sandbox and wait until it is Stopped (works from Ready, Error, Recovering, Provisioning)",
			messages.Verb_VERB_STOP, "force", messages.Verb_VERB_STOP_FORCE,
			"  stockade sandbox stop demo\n  stockade sandbox stop demo --force --no-wait"),
		newVerbCmd(&co, "start NAME [--no-wait] [--timeout D]", "Start a stopped, completed or failed sandbox on its workspace and wait until it is Ready",
			messages.Verb_VERB_START, "", 0,
			"  stockade sandbox start demo\n  stockade sandbox start demo --timeout 30s"),
		newVerbCmd(&co, "recover NAME [--no-wait] [--timeout D]", "Recover a sandbox in Error or Recovering now (resets the attempt count) and wait until it is Ready",
			messages.Verb_VERB_RECOVER, "", 0,
			"  stockade sandbox recover demo"),
		newDeleteCmd(&co),
	)
	// exec, connect, ssh-proxy and ssh-config take a sandbox name first.
	for _, c := range cmd.Commands() {
		switch c.Name() {
		case "exec", "connect", "ssh-proxy", "ssh-config":
			if c.ValidArgsFunction == nil {
				c.ValidArgsFunction = completeFirstSandboxName
			}
		}
	}
	return cmd
}

// configuration returns the client configuration (nil and the error when
// there is none) and the gateway addresses to try: --gateway, else the
// configuration's, else the default.
func (co *clientOpts) configuration() (*client.Config, []string, error) {
	cfg, _, err := trust.LoadClientConfig(trust.ClientConfigPlaces(co.config, co.stateDir))
	var addrs []string
	for _, a := range strings.Split(co.gateway, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 && cfg != nil {
		addrs = cfg.Gateways
	}
	if len(addrs) == 0 {
		addrs = []string{client.DefaultGateway}
	}
	return cfg, addrs, err
}

// dial connects to the gateway; failures are exit code 5. A gateway that
// does not answer is said first, before a missing configuration.
func (co *clientOpts) dial(cmd *cobra.Command) (*client.Client, error) {
	cfg, addrs, cfgErr := co.configuration()
	addr, err := client.Reach(addrs)
	if err != nil {
		if cfgErr != nil {
			err = fmt.Errorf("%w\nalso: %v", err, cfgErr)
		}
		return nil, &exitError{exitUnreachable, err}
	}
	if cfgErr != nil {
		return nil, &exitError{exitUnreachable, cfgErr}
	}
	lvl, _ := cmd.Flags().GetString("log-level")
	log := newLogger(cmd)
	if lvl == "info" {
		log = log.Level(3) // clients stay quiet unless asked (warn)
	}
	c, err := client.Dial(addr, cfg, log)
	if err != nil {
		return nil, &exitError{exitUnreachable, err}
	}
	return c, nil
}

// request sends one request and turns a failure or a non-OK reply into an
// exit error with the code of DESIGN.md.
func request(c *client.Client, msg proto.Message) (*messages.Reply, error) {
	return requestCtx(context.Background(), c, msg)
}

// requestCtx is request bounded by ctx (a watch's interrupt).
func requestCtx(ctx context.Context, c *client.Client, msg proto.Message) (*messages.Reply, error) {
	reply, err := c.Request(ctx, msg)
	if err != nil {
		if errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrRefused) {
			return nil, &exitError{exitUnreachable, err}
		}
		return nil, &exitError{exitFailure, err}
	}
	if reply.Status != messages.Status_STATUS_OK {
		return reply, &exitError{errdefs.ExitCode(errdefs.KindOfStatus(reply.Status)), errdefs.FromReply(reply)}
	}
	return reply, nil
}

// call dials the gateway, sends one request and closes the connection.
func (co *clientOpts) call(cmd *cobra.Command, msg proto.Message) (*messages.Reply, error) {
	c, err := co.dial(cmd)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return request(c, msg)
}

// readRetryFor bounds a read's retries while gateways answer Unavailable.
const readRetryFor = 10 * time.Second

// read is call for an idempotent read (get, list, policy get): when the
// gateway it reached fails before answering (it died mid-request), or
// answers Unavailable (in a cluster: the sandbox's owner node died
// mid-request), the next address of the configuration is asked. Any other
// answer, an error one included, is final.
func (co *clientOpts) read(cmd *cobra.Command, msg proto.Message) (*messages.Reply, error) {
	_, addrs, _ := co.configuration()
	var err error
	var reply *messages.Reply
	// Every address once; while the answers are Unavailable, round again
	// until readRetryFor has passed (a lost owner is replaced within a
	// lease TTL or two).
	deadline := time.Now().Add(readRetryFor)
	for n := 0; n < len(addrs) || (reply != nil && time.Now().Before(deadline)); n++ {
		i := n % len(addrs)
		if n > 0 && reply != nil {
			time.Sleep(300 * time.Millisecond) // an owner is being replaced
		}
		next := *co
		next.gateway = strings.Join(append(slices.Clone(addrs[i:]), addrs[:i]...), ",")
		reply, err = next.call(cmd, msg)
		var ee *exitError
		retry := errors.As(err, &ee) && ee.code == exitUnreachable &&
			(reply == nil || reply.Status == messages.Status_STATUS_UNAVAILABLE)
		if !retry {
			return reply, err
		}
	}
	return reply, err
}

func newCreateCmd(co *clientOpts) *cobra.Command {
	var policyFile, workdir, restart string
	var w waitOpts
	var pids, logRate, logBurst int64
	var memory, ioBps, logSize string
	var cpus float64
	cmd := &cobra.Command{
		Use: "create NAME --policy FILE [--workdir DIR] [--restart POLICY] [--pids N] [--memory SIZE] [--cpus N] [--io-bps SIZE]" +
			" [--log-size SIZE] [--log-rate N] [--log-burst N] [--no-wait] [--timeout D] [-- CMD ARGS...]",
		Short: "Create a sandbox and wait until it is Ready",
		Long: `Create a sandbox NAME running CMD ARGS (default: /bin/sh -c 'exec sleep
infinity') under the policy FILE, with its workspace at /sandbox, and wait
until it is Ready.

` + waitHelp,
		Example: `  stockade sandbox create demo --policy examples/policy.yaml
  stockade sandbox create web --policy web.yaml --memory 512M --cpus 0.5 -- /usr/bin/python3 -m http.server
  stockade sandbox create job --policy job.yaml --restart never --no-wait -- /bin/sh -c 'make test'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pol, err := os.ReadFile(policyFile)
			if err != nil {
				return &exitError{exitUsage, fmt.Errorf("read policy: %w", err)}
			}
			limits := &messages.Limits{Pids: pids, Cpus: cpus, LogLinesPerSec: logRate, LogBurst: logBurst}
			for _, s := range []struct {
				flag, value string
				to          *int64
			}{{"io-bps", ioBps, &limits.IoBps}, {"memory", memory, &limits.MemoryBytes}, {"log-size", logSize, &limits.LogBytes}} {
				if *s.to, err = limitBytes(s.value); err != nil {
					return &exitError{exitUsage, fmt.Errorf("--%s: %w", s.flag, err)}
				}
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			name, start := args[0], time.Now()
			reply, err := request(c, &messages.CreateRequest{Name: name, PolicyFile: filepath.Base(policyFile),
				Policy: pol, Workdir: workdir, Argv: args[1:], Restart: restart, Limits: limits})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s\n", name, reply.Sandbox.Phase)
			if w.noWait {
				return nil
			}
			return waitFor(c, out, goalReady, reply.Sandbox, start, w.timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&policyFile, "policy", "", "policy file (OpenShell v1 YAML); required")
	f.StringVar(&workdir, "workdir", "", "working directory inside (default /sandbox)")
	f.StringVar(&restart, "restart", "on-failure", "restart policy: always, on-failure, never")
	f.Int64Var(&pids, "pids", 0, "most processes at once (default 512; -1: no limit)")
	f.StringVar(&memory, "memory", "", "most memory, swap and tmpfs included, e.g. 512M or 4G (default 2G; none: no limit)")
	f.Float64Var(&cpus, "cpus", 0, "most CPUs, e.g. 0.5 or 2 (default 2; -1: no limit)")
	f.StringVar(&ioBps, "io-bps", "", "most bytes per second read and written each on the workspace's disk, e.g. 50M, also the most written to the workload's log (default: no limit)")
	f.StringVar(&logSize, "log-size", "", "most bytes the workload's log takes on disk, its rotated files included, e.g. 16M (default 64M; at least 256K; none: no limit)")
	f.Int64Var(&logRate, "log-rate", 0, "most lines of output logged per second; the rest are dropped and counted (default 1000; -1: no limit)")
	f.Int64Var(&logBurst, "log-burst", 0, "most lines logged at once above --log-rate (default 10000)")
	w.addFlags(cmd)
	_ = cmd.MarkFlagRequired("policy")
	return cmd
}

func newVerbCmd(co *clientOpts, use, short string, verb messages.Verb, flag string, flagVerb messages.Verb, example string) *cobra.Command {
	var alt bool
	var w waitOpts
	cmd := &cobra.Command{
		Use:               use,
		Short:             short,
		Long:              short + ".\n\n" + waitHelp,
		Example:           example,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeFirstSandboxName,
		RunE: func(cmd *cobra.Command, args []string) error {
			v := verb
			if alt {
				v = flagVerb
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			start := time.Now()
			reply, err := request(c, &messages.SandboxRequest{Name: args[0], Verb: v})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s\n", args[0], reply.Sandbox.Phase)
			if w.noWait {
				return nil
			}
			return waitFor(c, out, goalOf(v), reply.Sandbox, start, w.timeout)
		},
	}
	w.addFlags(cmd)
	if flag != "" {
		cmd.Flags().BoolVar(&alt, flag, false, map[string]string{
			"force":          "kill at once, without the grace period",
			"keep-workspace": "keep the workspace directory",
		}[flag])
	}
	return cmd
}

// limitBytes reads a size flag: "" or 0 the default, -1 or none no limit,
// else a size (cgroup.ParseBytes).
func limitBytes(s string) (int64, error) {
	switch s {
	case "", "0":
		return 0, nil
	case "-1", "none":
		return -1, nil
	}
	return cgroup.ParseBytes(s)
}

// statusView is `sandbox get -o json|yaml` (and each item of `list`):
// camelCase keys, stable (docs/cli.md). One rule for empty values: a
// string that is empty (no reason, no message, no retry planned) and a pid
// that is 0 (no process) are omitted; counts (recoveryAttempts,
// policyVersion) are always present; restarts and transitions are always
// present, {} and [] when empty; resources is omitted when the gateway
// reports none.
type statusView struct {
	Name             string           `json:"name" yaml:"name"`
	UID              string           `json:"uid,omitempty" yaml:"uid,omitempty"`   // this creation (its logs)
	Node             string           `json:"node,omitempty" yaml:"node,omitempty"` // cluster: the owner node
	CreatedBy        string           `json:"createdBy,omitempty" yaml:"createdBy,omitempty"`
	Phase            string           `json:"phase" yaml:"phase"`
	Reason           string           `json:"reason,omitempty" yaml:"reason,omitempty"`
	Message          string           `json:"message,omitempty" yaml:"message,omitempty"`
	Since            string           `json:"since,omitempty" yaml:"since,omitempty"`
	RecoveryAttempts int32            `json:"recoveryAttempts" yaml:"recoveryAttempts"`
	NextRetry        string           `json:"nextRetry,omitempty" yaml:"nextRetry,omitempty"`
	PolicyVersion    uint64           `json:"policyVersion" yaml:"policyVersion"`
	Workspace        string           `json:"workspace,omitempty" yaml:"workspace,omitempty"`
	HostIDs          string           `json:"hostIds,omitempty" yaml:"hostIds,omitempty"` // as root: its host uid/gid range
	SupervisorPid    int32            `json:"supervisorPid,omitempty" yaml:"supervisorPid,omitempty"`
	WorkloadPid      int32            `json:"workloadPid,omitempty" yaml:"workloadPid,omitempty"`
	Restarts         map[string]int64 `json:"restarts" yaml:"restarts"`
	Transitions      []transitionView `json:"transitions" yaml:"transitions"`
	Resources        *resourcesView   `json:"resources,omitempty" yaml:"resources,omitempty"`
}

// resourcesView is `get`'s "resources": limits (0: none) and current use.
type resourcesView struct {
	Enforced       bool    `json:"enforced" yaml:"enforced"`
	Note           string  `json:"note,omitempty" yaml:"note,omitempty"`
	Cgroup         string  `json:"cgroup,omitempty" yaml:"cgroup,omitempty"`
	PidsLimit      int64   `json:"pidsLimit" yaml:"pidsLimit"`
	MemoryLimit    int64   `json:"memoryLimitBytes" yaml:"memoryLimitBytes"`
	CPUs           float64 `json:"cpus" yaml:"cpus"`
	IOBps          int64   `json:"ioBps" yaml:"ioBps"`
	Pids           int64   `json:"pids" yaml:"pids"`
	MemoryBytes    int64   `json:"memoryBytes" yaml:"memoryBytes"`
	CPUMs          int64   `json:"cpuMs" yaml:"cpuMs"`
	WorkspaceBytes int64   `json:"workspaceBytes" yaml:"workspaceBytes"`
	WorkspaceNote  string  `json:"workspaceNote,omitempty" yaml:"workspaceNote,omitempty"`
	OOMKills       int64   `json:"oomKills" yaml:"oomKills"`
	IOBytes        int64   `json:"ioBytes" yaml:"ioBytes"`
	LogLimit       int64   `json:"logLimitBytes" yaml:"logLimitBytes"`
	LogLinesPerSec int64   `json:"logLinesPerSec" yaml:"logLinesPerSec"`
	LogBurst       int64   `json:"logBurst" yaml:"logBurst"`
	LogBytes       int64   `json:"logBytes" yaml:"logBytes"`
	LogDropped     int64   `json:"logDroppedLines" yaml:"logDroppedLines"`
}

type transitionView struct {
	From    string `json:"from,omitempty" yaml:"from,omitempty"`
	To      string `json:"to" yaml:"to"`
	Reason  string `json:"reason,omitempty" yaml:"reason,omitempty"`
	At      string `json:"at" yaml:"at"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
	By      string `json:"by,omitempty" yaml:"by,omitempty"` // who asked
}

func viewOf(s *messages.SandboxStatus) statusView {
	v := statusView{Name: s.Name, UID: s.Uid, Node: s.Node, CreatedBy: s.CreatedBy, Phase: s.Phase, Reason: s.Reason, Message: s.Message, Since: msTime(s.SinceUnixMs),
		RecoveryAttempts: s.RecoveryAttempts, NextRetry: msTime(s.NextRetryUnixMs), PolicyVersion: s.PolicyVersion,
		Workspace: s.Workspace, HostIDs: s.HostIds, SupervisorPid: s.SupervisorPid, WorkloadPid: s.WorkloadPid, Restarts: s.Restarts,
		Transitions: []transitionView{}}
	if v.Restarts == nil {
		v.Restarts = map[string]int64{}
	}
	for _, t := range s.Transitions {
		v.Transitions = append(v.Transitions, transitionView{From: t.From, To: t.To, Reason: t.Reason, At: msTime(t.AtUnixMs), Message: t.Message, By: t.By})
	}
	if r := s.Resources; r != nil {
		v.Resources = &resourcesView{Enforced: r.Enforced, Note: r.Note, Cgroup: r.Cgroup,
			PidsLimit: r.GetLimits().GetPids(), MemoryLimit: r.GetLimits().GetMemoryBytes(), CPUs: r.GetLimits().GetCpus(),
			Pids: r.Pids, MemoryBytes: r.MemoryBytes, CPUMs: r.CpuMs, WorkspaceBytes: r.WorkspaceBytes, OOMKills: r.OomKills,
			WorkspaceNote: r.WorkspaceNote, IOBps: r.GetLimits().GetIoBps(), IOBytes: r.IoBytes,
			LogLimit: r.GetLimits().GetLogBytes(), LogLinesPerSec: r.GetLimits().GetLogLinesPerSec(), LogBurst: r.GetLimits().GetLogBurst(),
			LogBytes: r.LogBytes, LogDropped: r.LogDroppedLines}
	}
	return v
}

// render prints v as JSON (indented), YAML (maps with sorted keys, like
// JSON) or the table.
func render(w io.Writer, format string, v any, table func(*tabwriter.Writer)) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		return yaml.NewEncoder(w).Encode(v)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	default:
		return &exitError{exitUsage, fmt.Errorf("-o %q: want table, json or yaml", format)}
	}
}

// addOutputFlag adds -o with its values completed.
func addOutputFlag(cmd *cobra.Command, p *string, def string, values ...string) {
	usage := strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
	cmd.Flags().StringVarP(p, "output", "o", def, usage)
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// statusTable is `get`'s table: one "label value" row per key of the JSON
// form, in the same order.
func statusTable(tw *tabwriter.Writer, v statusView, now time.Time) {
	since := "-"
	if v.Since != "" {
		if t, err := time.Parse(time.RFC3339Nano, v.Since); err == nil {
			since = v.Since + " (" + age(t, now) + " ago)"
		}
	}
	fmt.Fprintf(tw, "name\t%s\nuid\t%s\ncreated by\t%s\nphase\t%s\nreason\t%s\nmessage\t%s\nsince\t%s\nrecovery attempts\t%d\nnext retry\t%s\npolicy version\t%d\nworkspace\t%s\nhost ids\t%s\nsupervisor pid\t%s\nworkload pid\t%s\n",
		v.Name, dash(v.UID), dash(v.CreatedBy), v.Phase, dash(v.Reason), dash(v.Message), since, v.RecoveryAttempts, dash(v.NextRetry), v.PolicyVersion,
		dash(v.Workspace), dash(v.HostIDs), pidText(v.SupervisorPid), pidText(v.WorkloadPid))
	fmt.Fprintf(tw, "restarts\t%s\n", countsText(v.Restarts))
	if r := v.Resources; r != nil {
		limits := fmt.Sprintf("pids %s, memory %s, cpus %s, io %s", orNone(r.PidsLimit, strconv.FormatInt(r.PidsLimit, 10)),
			cgroup.FormatBytes(r.MemoryLimit), orNone(int64(r.CPUs*100), strconv.FormatFloat(r.CPUs, 'f', -1, 64)),
			orNone(r.IOBps, cgroup.FormatBytes(r.IOBps)+"/s"))
		limits += fmt.Sprintf(", log %s at %s", cgroup.FormatBytes(r.LogLimit),
			orNone(r.LogLinesPerSec, fmt.Sprintf("%d lines/s (burst %d)", r.LogLinesPerSec, r.LogBurst)))
		if !r.Enforced {
			limits += " (not enforced: " + dash(r.Note) + ")"
		}
		fmt.Fprintf(tw, "limits\t%s\n", limits)
		fmt.Fprintf(tw, "use\tpids %d, memory %s, cpu %s, io %s, workspace %s (%s), oom kills %d, log %s (%d lines dropped)\n", r.Pids, cgroup.FormatBytes(r.MemoryBytes),
			(time.Duration(r.CPUMs) * time.Millisecond).String(), cgroup.FormatBytes(r.IOBytes), cgroup.FormatBytes(r.WorkspaceBytes), dash(r.WorkspaceNote), r.OOMKills,
			cgroup.FormatBytes(r.LogBytes), r.LogDropped)
	}
	fmt.Fprintln(tw, "transitions\t(time, from -> to, reason, by whom; -o json adds each message)")
	for _, t := range v.Transitions {
		fmt.Fprintf(tw, "  %s\t%s -> %s\t%s\t%s\n", t.At, dash(t.From), t.To, dash(t.Reason), dash(t.By))
	}
}

func pidText(pid int32) string {
	if pid == 0 {
		return "-"
	}
	return strconv.Itoa(int(pid))
}

func newGetCmd(co *clientOpts) *cobra.Command {
	var format string
	var watch bool
	cmd := &cobra.Command{
		Use:   "get NAME [-o table|json|yaml] [-w]",
		Short: "Show a sandbox: phase, reason, message, recovery, pids, transitions",
		Long: `Show a sandbox: phase, reason, message, recovery, pids, limits and use, and
its recent transitions. -o json and -o yaml print the keys docs/cli.md
lists (empty values omitted). -w prints one line now and one line per change
of phase, reason, message or pids (polled every 300 ms) until Ctrl-C (exit
0) or the sandbox is deleted (a last line says so; exit 0).`,
		Example: `  stockade sandbox get demo
  stockade sandbox get demo -o json | jq -r .phase
  stockade sandbox get demo -w`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeFirstSandboxName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				if format != "table" {
					return &exitError{exitUsage, fmt.Errorf("-w prints one line per change; -o %s is for a single get (leave out -w or -o)", format)}
				}
				return co.watch(cmd, args[0])
			}
			reply, err := co.read(cmd, &messages.SandboxRequest{Name: args[0], Verb: messages.Verb_VERB_GET})
			if err != nil {
				return err
			}
			v := viewOf(reply.Sandbox)
			return render(cmd.OutOrStdout(), format, v, func(tw *tabwriter.Writer) { statusTable(tw, v, time.Now()) })
		},
	}
	addOutputFlag(cmd, &format, "table", "table", "json", "yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print a line per change until Ctrl-C")
	return cmd
}

// listTable is `list`'s table: AGE is the time in the current phase.
func listTable(tw *tabwriter.Writer, list []*messages.SandboxStatus, now time.Time) {
	fmt.Fprintln(tw, "NAME\tPHASE\tREASON\tAGE\tRESTARTS")
	for _, s := range list {
		var restarts int64
		for _, n := range s.Restarts {
			restarts += n
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", s.Name, s.Phase, dash(s.Reason), ageMs(s.SinceUnixMs, now), restarts)
	}
}

func newListCmd(co *clientOpts) *cobra.Command {
	var format string
	var watch bool
	cmd := &cobra.Command{
		Use:     "list [-o table|json|yaml] [-w]",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Long: `List the gateway's sandboxes, by name: NAME, PHASE, REASON, AGE (time in
the current phase: 5s, 3m, 2h, 4d) and RESTARTS (the sum of the restarts
counts). -o json and -o yaml print a list of the objects "get -o json"
prints (with "since", the time AGE counts from). -w prints one line per
sandbox now and one line per change (a sandbox created, changed or deleted),
polled every 300 ms, until Ctrl-C (exit 0).`,
		Example: `  stockade sandbox list
  stockade sandbox ls -o json | jq -r '.[] | select(.phase != "Ready") | .name'
  stockade sandbox list -w`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if watch {
				if format != "table" {
					return &exitError{exitUsage, fmt.Errorf("-w prints one line per change; -o %s is for a single list (leave out -w or -o)", format)}
				}
				return co.watch(cmd, "")
			}
			reply, err := co.read(cmd, &messages.ListRequest{})
			if err != nil {
				return err
			}
			sortByName(reply.Sandboxes)
			views := []statusView{}
			for _, s := range reply.Sandboxes {
				views = append(views, viewOf(s))
			}
			return render(cmd.OutOrStdout(), format, views, func(tw *tabwriter.Writer) { listTable(tw, reply.Sandboxes, time.Now()) })
		},
	}
	addOutputFlag(cmd, &format, "table", "table", "json", "yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print a line per change until Ctrl-C")
	return cmd
}

func newFaultCmd(co *clientOpts) *cobra.Command {
	var gw bool
	cmd := &cobra.Command{
		Use:    "fault (NAME | --gateway) POINT=KIND[:COUNT][@SKIP]",
		Short:  "Arm a fault in a sandbox's supervisor or in the gateway (testing, chaos)",
		Hidden: true,
		Example: `  stockade sandbox fault demo session.silence=error:5
  stockade sandbox fault --gateway supervisor.start=error:1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if want := map[bool]int{true: 1, false: 2}[gw]; len(args) != want {
				return fmt.Errorf("want NAME POINT=KIND, or --gateway POINT=KIND")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, rule := "", args[0]
			if !gw {
				name, rule = args[0], args[1]
			}
			reply, err := co.call(cmd, &messages.FaultRequest{Name: name, Rule: rule})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (fired before: %d)\n", reply.Message, reply.Fired)
			return nil
		},
	}
	cmd.Flags().BoolVar(&gw, "gateway", false, "arm the fault in the gateway (it must run with --chaos)")
	return cmd
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// orNone is s, or "none" when n <= 0.
func orNone(n int64, s string) string {
	if n <= 0 {
		return "none"
	}
	return s
}

// newDeleteCmd is `sandbox delete NAME... | --all`: every delete is sent,
// then the command waits until all are gone. The exit code is the largest
// of the per-name codes (0 only when every one was deleted).
func newDeleteCmd(co *clientOpts) *cobra.Command {
	var keep, all bool
	var w waitOpts
	cmd := &cobra.Command{
		Use:     "delete (NAME... | --all) [--keep-workspace] [--no-wait] [--timeout D]",
		Aliases: []string{"rm"},
		Short:   "Delete sandboxes and their workspaces, and wait until they are gone",
		Long: `Delete each NAME (or, with --all, every sandbox the gateway lists) and its
workspace (--keep-workspace keeps it: a sandbox created again with the same
name finds it). Every delete is sent first; then the command waits until
each is gone, printing "NAME: deleted (+T)".

Exit status: the largest of the per-name exit codes, so 0 only when every
sandbox was deleted; each failure is printed on stderr as it happens (3: no
such sandbox, 4: refused, 5: no gateway, 1: not gone within --timeout).
--all with no sandboxes is 0. --no-wait returns once every delete was
accepted.`,
		Example: `  stockade sandbox delete demo
  stockade sandbox rm a b c
  stockade sandbox delete --all --no-wait
  stockade sandbox delete demo --keep-workspace`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return &exitError{exitUsage, fmt.Errorf("delete: give NAMEs or --all, not both")}
			case !all && len(args) == 0:
				return &exitError{exitUsage, fmt.Errorf("delete: name at least one sandbox, or --all (stockade sandbox list shows them)")}
			}
			return nil
		},
		ValidArgsFunction: completeSandboxNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			verb := messages.Verb_VERB_DELETE
			if keep {
				verb = messages.Verb_VERB_DELETE_KEEP_WORKSPACE
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			names := args
			if all {
				reply, err := request(c, &messages.ListRequest{})
				if err != nil {
					return err
				}
				for _, s := range reply.Sandboxes {
					names = append(names, s.Name)
				}
			}
			return deleteAll(c, cmd.OutOrStdout(), cmd.ErrOrStderr(), names, verb, w)
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-workspace", false, "keep the workspace directory")
	cmd.Flags().BoolVar(&all, "all", false, "delete every sandbox the gateway lists")
	w.addFlags(cmd)
	return cmd
}

// deleteAll sends every delete, then waits for each to be gone. A single
// name fails with its own error; several print each failure on errOut and
// fail with the largest code (worstExit).
func deleteAll(c *client.Client, out, errOut io.Writer, names []string, verb messages.Verb, w waitOpts) error {
	start := time.Now()
	failed := map[string]error{}
	var pending []*messages.SandboxStatus
	for _, n := range names {
		reply, err := request(c, &messages.SandboxRequest{Name: n, Verb: verb})
		if err != nil {
			failed[n] = err
			if len(names) > 1 {
				fmt.Fprintln(errOut, "stockade:", err)
			}
			continue
		}
		fmt.Fprintf(out, "%s: %s\n", n, reply.Sandbox.Phase)
		pending = append(pending, reply.Sandbox)
	}
	if !w.noWait {
		type result struct {
			name string
			err  error
		}
		// One goroutine per name; all share the one connection.
		done := make(chan result, len(pending))
		var mu sync.Mutex // one line at a time on out
		for _, st := range pending {
			go func(st *messages.SandboxStatus) {
				done <- result{st.Name, waitFor(c, &lockedWriter{w: out, mu: &mu}, goalGone, st, start, w.timeout)}
			}(st)
		}
		for range pending {
			r := <-done
			if r.err != nil {
				failed[r.name] = r.err
				if len(names) > 1 {
					fmt.Fprintln(errOut, "stockade:", r.err)
				}
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if len(names) == 1 {
		return failed[names[0]]
	}
	var codes []int
	for _, err := range failed {
		codes = append(codes, exitCodeOf(err))
	}
	return &exitError{worstExit(codes...), fmt.Errorf("delete: %d of %d sandboxes not deleted (see above)", len(failed), len(names))}
}

// worstExit is the exit code of several results: the largest.
func worstExit(codes ...int) int {
	worst := exitOK
	for _, c := range codes {
		worst = max(worst, c)
	}
	return worst
}

// exitCodeOf is the exit code main gives err.
func exitCodeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	default:
		return exitFailure
	}
}

// lockedWriter serialises writes of goroutines sharing one writer.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
