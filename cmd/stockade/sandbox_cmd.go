package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	cmd := &cobra.Command{Use: "sandbox", Short: "Create and manage sandboxes on a gateway"}
	co.addClientFlags(cmd.PersistentFlags())
	cmd.AddCommand(newCreateCmd(&co), newGetCmd(&co), newListCmd(&co), newLogsCmd(&co),
		newExecCmd(&co), newSSHProxyCmd(&co), newSSHConfigCmd(&co), newConnectCmd(&co), newFaultCmd(&co),
		newVerbCmd(&co, "stop NAME", "Stop a sandbox (works from Ready, Error, Recovering, Provisioning)", messages.Verb_VERB_STOP, "force", messages.Verb_VERB_STOP_FORCE),
		newVerbCmd(&co, "start NAME", "Start a stopped, completed or failed sandbox on its workspace", messages.Verb_VERB_START, "", 0),
		newVerbCmd(&co, "recover NAME", "Recover a sandbox in Error or Recovering now (resets the attempt count)", messages.Verb_VERB_RECOVER, "", 0),
		newVerbCmd(&co, "delete NAME", "Delete a sandbox and its workspace", messages.Verb_VERB_DELETE, "keep-workspace", messages.Verb_VERB_DELETE_KEEP_WORKSPACE),
	)
	return cmd
}

// configuration returns the client configuration (nil and the error when
// there is none) and the gateway addresses to try: --gateway, else the
// configuration's, else the default.
func (co *clientOpts) configuration() (*client.Config, []string, error) {
	cfg, _, err := client.LoadConfig(client.ConfigPlaces(co.config, co.stateDir))
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
	reply, err := c.Request(context.Background(), msg)
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

func newCreateCmd(co *clientOpts) *cobra.Command {
	var policyFile, workdir, restart string
	var noWait bool
	var timeout time.Duration
	var pids int64
	var memory, ioBps string
	var cpus float64
	cmd := &cobra.Command{
		Use:   "create NAME --policy FILE [--workdir DIR] [--pids N] [--memory SIZE] [--cpus N] [--no-wait] [-- CMD ARGS...]",
		Short: "Create a sandbox and wait until it is Ready",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pol, err := os.ReadFile(policyFile)
			if err != nil {
				return &exitError{exitUsage, fmt.Errorf("read policy: %w", err)}
			}
			limits := &messages.Limits{Pids: pids, Cpus: cpus}
			if ioBps != "" {
				if limits.IoBps, err = cgroup.ParseBytes(ioBps); err != nil {
					return &exitError{exitUsage, fmt.Errorf("--io-bps: %w", err)}
				}
			}
			switch memory {
			case "", "0":
			case "-1", "none":
				limits.MemoryBytes = -1
			default:
				if limits.MemoryBytes, err = cgroup.ParseBytes(memory); err != nil {
					return &exitError{exitUsage, fmt.Errorf("--memory: %w", err)}
				}
			}
			c, err := co.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			name := args[0]
			reply, err := request(c, &messages.CreateRequest{Name: name, PolicyFile: filepath.Base(policyFile),
				Policy: pol, Workdir: workdir, Argv: args[1:], Restart: restart, Limits: limits})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s\n", name, reply.Sandbox.Phase)
			if noWait {
				return nil
			}
			return waitReady(c, out, name, reply.Sandbox.Phase, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&policyFile, "policy", "", "policy file (OpenShell v1 YAML); required")
	f.StringVar(&workdir, "workdir", "", "working directory inside (default /sandbox)")
	f.StringVar(&restart, "restart", "on-failure", "restart policy: always, on-failure, never")
	f.BoolVar(&noWait, "no-wait", false, "return once the sandbox is recorded, without waiting for Ready")
	f.Int64Var(&pids, "pids", 0, "most processes at once (default 512; -1: no limit)")
	f.StringVar(&memory, "memory", "", "most memory, swap and tmpfs included, e.g. 512M or 4G (default 2G; none: no limit)")
	f.Float64Var(&cpus, "cpus", 0, "most CPUs, e.g. 0.5 or 2 (default 2; -1: no limit)")
	f.StringVar(&ioBps, "io-bps", "", "most bytes per second read and written each on the workspace's disk, e.g. 50M (default: no limit)")
	f.DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for Ready")
	_ = cmd.MarkFlagRequired("policy")
	return cmd
}

// waitReady polls the sandbox, printing each phase as it passes, until
// Ready (or Completed: the workload already ran to its end).
func waitReady(c *client.Client, out io.Writer, name, last string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		reply, err := request(c, &messages.SandboxRequest{Name: name, Verb: messages.Verb_VERB_GET})
		if err != nil {
			return err
		}
		st := reply.Sandbox
		if st.Phase != last {
			line := fmt.Sprintf("%s: %s", name, st.Phase)
			if st.Reason != "" {
				line += "/" + st.Reason
			}
			if st.Message != "" && st.Phase != "Ready" {
				line += ": " + st.Message
			}
			fmt.Fprintln(out, line)
			last = st.Phase
		}
		switch st.Phase {
		case "Ready", "Completed":
			return nil
		case "Error":
			if st.Reason == "RecoveryExhausted" {
				return &exitError{exitFailure, fmt.Errorf("sandbox %s: %s: %s (stockade sandbox recover %s tries again)", name, st.Reason, st.Message, name)}
			}
		}
		if time.Now().After(deadline) {
			return &exitError{exitFailure, fmt.Errorf("sandbox %s is %s after %s (see stockade sandbox get %s)", name, st.Phase, timeout, name)}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func newVerbCmd(co *clientOpts, use, short string, verb messages.Verb, flag string, flagVerb messages.Verb) *cobra.Command {
	var alt bool
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v := verb
			if alt {
				v = flagVerb
			}
			reply, err := co.call(cmd, &messages.SandboxRequest{Name: args[0], Verb: v})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", args[0], reply.Sandbox.Phase)
			return nil
		},
	}
	if flag != "" {
		cmd.Flags().BoolVar(&alt, flag, false, map[string]string{
			"force":          "kill at once, without the grace period",
			"keep-workspace": "keep the workspace directory",
		}[flag])
	}
	return cmd
}

// statusView is `sandbox get -o json|yaml`: camelCase keys, stable (DESIGN.md).
type statusView struct {
	Name             string           `json:"name" yaml:"name"`
	UID              string           `json:"uid,omitempty" yaml:"uid,omitempty"` // this creation (its logs)
	Phase            string           `json:"phase" yaml:"phase"`
	Reason           string           `json:"reason" yaml:"reason"`
	Message          string           `json:"message" yaml:"message"`
	Since            string           `json:"since" yaml:"since"`
	RecoveryAttempts int32            `json:"recoveryAttempts" yaml:"recoveryAttempts"`
	NextRetry        string           `json:"nextRetry" yaml:"nextRetry"`
	PolicyVersion    uint64           `json:"policyVersion" yaml:"policyVersion"`
	Workspace        string           `json:"workspace" yaml:"workspace"`
	SupervisorPid    int32            `json:"supervisorPid" yaml:"supervisorPid"`
	WorkloadPid      int32            `json:"workloadPid" yaml:"workloadPid"`
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
}

type transitionView struct {
	From    string `json:"from" yaml:"from"`
	To      string `json:"to" yaml:"to"`
	Reason  string `json:"reason" yaml:"reason"`
	At      string `json:"at" yaml:"at"`
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
}

func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func viewOf(s *messages.SandboxStatus) statusView {
	v := statusView{Name: s.Name, UID: s.Uid, Phase: s.Phase, Reason: s.Reason, Message: s.Message, Since: msTime(s.SinceUnixMs),
		RecoveryAttempts: s.RecoveryAttempts, NextRetry: msTime(s.NextRetryUnixMs), PolicyVersion: s.PolicyVersion,
		Workspace: s.Workspace, SupervisorPid: s.SupervisorPid, WorkloadPid: s.WorkloadPid, Restarts: s.Restarts,
		Transitions: []transitionView{}}
	if v.Restarts == nil {
		v.Restarts = map[string]int64{}
	}
	for _, t := range s.Transitions {
		v.Transitions = append(v.Transitions, transitionView{From: t.From, To: t.To, Reason: t.Reason, At: msTime(t.AtUnixMs), Message: t.Message})
	}
	if r := s.Resources; r != nil {
		v.Resources = &resourcesView{Enforced: r.Enforced, Note: r.Note, Cgroup: r.Cgroup,
			PidsLimit: r.GetLimits().GetPids(), MemoryLimit: r.GetLimits().GetMemoryBytes(), CPUs: r.GetLimits().GetCpus(),
			Pids: r.Pids, MemoryBytes: r.MemoryBytes, CPUMs: r.CpuMs, WorkspaceBytes: r.WorkspaceBytes, OOMKills: r.OomKills,
			WorkspaceNote: r.WorkspaceNote, IOBps: r.GetLimits().GetIoBps(), IOBytes: r.IoBytes}
	}
	return v
}

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

func newGetCmd(co *clientOpts) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get NAME [-o table|json|yaml]",
		Short: "Show a sandbox: phase, reason, message, recovery, pids, transitions",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reply, err := co.call(cmd, &messages.SandboxRequest{Name: args[0], Verb: messages.Verb_VERB_GET})
			if err != nil {
				return err
			}
			v := viewOf(reply.Sandbox)
			return render(cmd.OutOrStdout(), format, v, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "name\t%s\nphase\t%s\nreason\t%s\nmessage\t%s\nsince\t%s\nrecovery attempts\t%d\nnext retry\t%s\npolicy version\t%d\nworkspace\t%s\nsupervisor pid\t%d\nworkload pid\t%d\n",
					v.Name, v.Phase, dash(v.Reason), dash(v.Message), v.Since, v.RecoveryAttempts, dash(v.NextRetry), v.PolicyVersion, v.Workspace, v.SupervisorPid, v.WorkloadPid)
				var rs []string
				for k, n := range v.Restarts {
					rs = append(rs, fmt.Sprintf("%s=%d", k, n))
				}
				fmt.Fprintf(tw, "restarts\t%s\n", dash(strings.Join(rs, " ")))
				if r := v.Resources; r != nil {
					limits := fmt.Sprintf("pids %s, memory %s, cpus %s, io %s", orNone(r.PidsLimit, strconv.FormatInt(r.PidsLimit, 10)),
						cgroup.FormatBytes(r.MemoryLimit), orNone(int64(r.CPUs*100), strconv.FormatFloat(r.CPUs, 'f', -1, 64)),
						orNone(r.IOBps, cgroup.FormatBytes(r.IOBps)+"/s"))
					if !r.Enforced {
						limits += " (not enforced: " + dash(r.Note) + ")"
					}
					fmt.Fprintf(tw, "limits\t%s\n", limits)
					fmt.Fprintf(tw, "use\tpids %d, memory %s, cpu %s, io %s, workspace %s (%s), oom kills %d\n", r.Pids, cgroup.FormatBytes(r.MemoryBytes),
						(time.Duration(r.CPUMs) * time.Millisecond).String(), cgroup.FormatBytes(r.IOBytes), cgroup.FormatBytes(r.WorkspaceBytes), dash(r.WorkspaceNote), r.OOMKills)
				}
				for _, t := range v.Transitions { // messages: -o json or yaml
					fmt.Fprintf(tw, "  %s\t%s -> %s\t%s\n", t.At, t.From, t.To, t.Reason)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "table, json or yaml")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newListCmd(co *clientOpts) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "list [-o table|json|yaml]",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reply, err := co.call(cmd, &messages.ListRequest{})
			if err != nil {
				return err
			}
			views := []statusView{}
			for _, s := range reply.Sandboxes {
				views = append(views, viewOf(s))
			}
			return render(cmd.OutOrStdout(), format, views, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NAME\tPHASE\tREASON\tSINCE")
				for _, v := range views {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.Phase, dash(v.Reason), v.Since)
				}
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "table, json or yaml")
	return cmd
}

func newFaultCmd(co *clientOpts) *cobra.Command {
	var gw bool
	cmd := &cobra.Command{
		Use:    "fault (NAME | --gateway) POINT=KIND[:COUNT][@SKIP]",
		Short:  "Arm a fault in a sandbox's supervisor or in the gateway (testing, chaos)",
		Hidden: true,
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
