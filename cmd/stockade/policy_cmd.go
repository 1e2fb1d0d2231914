package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/policy"
)

// newPolicyCmd returns `stockade policy`: the offline verbs check and eval,
// and set/get, which talk to a gateway.
func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Validate and evaluate sandbox policies (OpenShell v1 YAML)",
	}
	cmd.AddCommand(newPolicyCheckCmd(), newPolicyEvalCmd(), newPolicySetCmd(), newPolicyGetCmd())
	return cmd
}

// clientFlags adds the gateway client flags to a command outside `sandbox`.
func clientFlags(cmd *cobra.Command) *clientOpts {
	var co clientOpts
	co.addClientFlags(cmd.Flags())
	return &co
}

func newPolicySetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set NAME FILE",
		Short: "Hot-reload a sandbox's policy; prints the new version",
		Long: `Validates FILE (errors with line:col, exit 2), saves it as the sandbox's next
policy version and pushes it to the running supervisor: network rules apply
to the next connection or query; filesystem_policy, landlock and
stockade.allow_ptrace apply at the next start. A supervisor that misses the push gets it when it reconnects.`,
		Args: cobra.ExactArgs(2),
	}
	co := clientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		// Checked here for file:line:col errors without a round trip; the
		// gateway checks again (it trusts no client).
		data, err := readPolicyFile(args[1])
		if err != nil {
			return err
		}
		if _, err := policy.Parse(args[1], data); err != nil {
			return policyError(cmd, args[1], err)
		}
		reply, err := co.call(cmd, &messages.PolicyRequest{Name: args[0], Policy: data, File: filepath.Base(args[1])})
		if err != nil {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), reply.Message)
		return nil
	}
	return cmd
}

func newPolicyGetCmd() *cobra.Command {
	var rev uint64
	cmd := &cobra.Command{
		Use:   "get NAME [--rev N]",
		Short: "Print a sandbox's policy (current, or an earlier version)",
		Args:  cobra.ExactArgs(1),
	}
	co := clientFlags(cmd)
	cmd.Flags().Uint64Var(&rev, "rev", 0, "the version to print (default: the current one)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		reply, err := co.read(cmd, &messages.PolicyRequest{Name: args[0], Rev: rev})
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "# sandbox %s, policy version %d\n%s", args[0], reply.PolicyVersion, reply.Policy)
		return nil
	}
	return cmd
}

// loadPolicyFile loads FILE into a fresh engine. An invalid policy prints
// every error to stderr, one per line, and exits 2.
func loadPolicyFile(cmd *cobra.Command, file string) (*policy.Engine, error) {
	data, err := readPolicyFile(file)
	if err != nil {
		return nil, err
	}
	e := policy.NewEngine()
	if _, err := e.Load(file, data); err != nil {
		return nil, policyError(cmd, file, err)
	}
	return e, nil
}

func readPolicyFile(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("read policy: %w", err)}
	}
	return data, nil
}

// policyError prints every error of an invalid policy to stderr, one per
// line as file:line:col: message, and returns exit 2.
func policyError(cmd *cobra.Command, file string, err error) error {
	var list policy.ErrorList
	if !errors.As(err, &list) {
		return &exitError{code: exitUsage, err: err}
	}
	for _, pe := range list {
		fmt.Fprintln(cmd.ErrOrStderr(), pe.Error())
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("%s: invalid policy (%d errors)", file, len(list))}
}

func newPolicyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy; print every error with file:line:col",
		Long: `Validate a policy file.

Exit 0 when valid: prints "FILE: valid (N network policies, M endpoints)"
and one line per field that is accepted but not enforced (L7 rules,
protocol, tls, middlewares, ...), each with file:line:col; then what the
baseline adds to every sandbox (read-only /usr, /bin, /lib, /etc, /proc
...; read-write /tmp and the workspace /sandbox), whether the sandbox's
processes may ptrace one another (stockade.allow_ptrace, a stockade
extension; default false), and a warning, with
file:line:col and the fix, for every endpoint the boundary refuses
whatever the policy says (loopback unless the gateway runs with
--allow-loopback-upstream, a private address outside the endpoint's
allowed_ips, link-local and metadata addresses, control-plane ports).
Exit 2 when invalid (or unreadable): every error goes to stderr, one per
line, as file:line:col: message.

Example:
  stockade policy check examples/policy.yaml`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := loadPolicyFile(cmd, args[0])
			if err != nil {
				return err
			}
			pol, _ := e.Current()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: valid (%d network policies, %d endpoints)\n", args[0], len(pol.NetworkPolicies), pol.EndpointCount())
			for _, n := range pol.Notices() {
				fmt.Fprintln(out, n.String())
			}
			printBaseline(out, pol)
			printExtensions(out, pol)
			for _, n := range pol.BoundaryWarnings() {
				fmt.Fprintln(out, n.String())
			}
			return nil
		},
	}
}

// printBaseline says what the baseline adds to the policy's filesystem
// lists (policy.Baseline).
func printBaseline(w io.Writer, pol *policy.Policy) {
	add := pol.BaselineAdds()
	list := func(ps []string) string {
		if len(ps) == 0 {
			return "(nothing more)"
		}
		return strings.Join(ps, " ")
	}
	fmt.Fprintf(w, "baseline (added to every sandbox): read-only %s; read-write %s\n", list(add.ReadOnly), list(add.ReadWrite))
}

// printExtensions says what stockade's own keys (the "stockade" section,
// not OpenShell's) make of the sandbox, set or not.
func printExtensions(w io.Writer, pol *policy.Policy) {
	at := "default"
	if p := pol.Stockade.AllowPtraceAt; p.Line > 0 {
		at = fmt.Sprintf("%s:%d:%d", pol.File, p.Line, p.Col)
	}
	if pol.Stockade.AllowPtrace {
		fmt.Fprintf(w, "stockade.allow_ptrace: true (%s; a stockade extension): the sandbox's processes may ptrace, process_vm_readv and process_vm_writev one another; "+
			"a traced process's connections are denied binary_tampered\n", at)
		return
	}
	fmt.Fprintf(w, "stockade.allow_ptrace: false (%s): ptrace, process_vm_readv and process_vm_writev between the sandbox's processes fail with EPERM\n", at)
}

type evalFlags struct {
	host         string
	port         uint16
	binary       string
	ancestors    []string
	identityNone bool
	dns          string
	qtype        uint16
	output       string
}

func newPolicyEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval FILE (--host H --port P [--binary PATH] [--ancestor PATH]... [--identity-none] | --dns NAME) [-o text|json]",
		Short: "Evaluate one network or DNS decision against a policy",
		Long: `Evaluate one decision against a policy file, offline, with the same
engine the boundary uses, and print it: allow, reason, policy, message,
version, and for an allowed connection exactHost and allowedIps. Text and
-o json use the same keys; an empty or false value is left out of both
(allow and version are always there).

Network: --host and --port, the connecting --binary (exe path) and its
--ancestor paths (repeatable, nearest first). --identity-none ignores
binaries (endpoint-only matching), as the boundary's --identity none does.
DNS: --dns NAME asks whether NAME may be resolved.

Exit status: 0 allowed, 1 denied, 2 invalid policy or usage.`,
		Args:         cobra.ExactArgs(1),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyEval(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.host, "host", "", "destination host")
	fl.Uint16Var(&f.port, "port", 0, "destination port (1-65535)")
	fl.StringVar(&f.binary, "binary", "", "path of the connecting executable")
	fl.StringArrayVar(&f.ancestors, "ancestor", nil, "path of an ancestor executable (repeatable)")
	fl.BoolVar(&f.identityNone, "identity-none", false, "ignore binaries (endpoint-only matching)")
	fl.StringVar(&f.dns, "dns", "", "evaluate a DNS query for this name instead of a connection")
	fl.Uint16Var(&f.qtype, "qtype", 1, "DNS query type number (with --dns; 1 = A)")
	fl.StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	return cmd
}

func runPolicyEval(cmd *cobra.Command, file string, f evalFlags) error {
	network := f.host != "" || f.port != 0 || f.binary != "" || len(f.ancestors) > 0 || f.identityNone
	switch {
	case f.output != "text" && f.output != "json":
		return &exitError{code: exitUsage, err: fmt.Errorf("-o %q: want text or json", f.output)}
	case f.dns != "" && network:
		return &exitError{code: exitUsage, err: errors.New("--dns evaluates a DNS query: it takes none of --host, --port, --binary, --ancestor, --identity-none")}
	case f.dns == "" && (f.host == "" || f.port == 0):
		return &exitError{code: exitUsage, err: errors.New("need --host and --port (1-65535), or --dns NAME")}
	}
	e, err := loadPolicyFile(cmd, file)
	if err != nil {
		return err
	}
	var d policy.Decision
	if f.dns != "" {
		d = e.DecideDNS(context.Background(), policy.DNSInput{Name: f.dns, QType: f.qtype})
	} else {
		d = e.DecideNetwork(context.Background(), policy.NetworkInput{
			Host: f.host, Port: f.port, Exe: f.binary, Ancestors: f.ancestors, IdentityNone: f.identityNone,
		})
	}
	if err := printDecision(cmd.OutOrStdout(), f.output, d, f.dns == ""); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	if !d.Allow {
		return &exitError{code: exitFailure, err: fmt.Errorf("denied: %s", d.Reason)}
	}
	return nil
}

// decisionJSON is the -o json shape; keys are stable, camelCase like the
// rest of the CLI's JSON, and the text form prints the same keys in the
// same order. Empty values are left out of both.
type decisionJSON struct {
	Allow      bool           `json:"allow"`
	Reason     string         `json:"reason,omitempty"`
	Policy     string         `json:"policy,omitempty"`
	PolicyName string         `json:"policyName,omitempty"`
	Message    string         `json:"message,omitempty"`
	Version    uint64         `json:"version"`
	ExactHost  bool           `json:"exactHost,omitempty"`
	AllowedIPs []netip.Prefix `json:"allowedIps,omitempty"`
}

func printDecision(w io.Writer, format string, d policy.Decision, network bool) error {
	out := decisionJSON{Allow: d.Allow, Reason: string(d.Reason), Policy: d.Policy, PolicyName: d.PolicyName, Message: d.Message, Version: d.Version}
	if d.Allow && network {
		out.ExactHost, out.AllowedIPs = d.ExactHost, d.AllowedIPs
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	var b strings.Builder
	field := func(key string, v any, empty bool) {
		if !empty {
			fmt.Fprintf(&b, "%-11s %v\n", key, v)
		}
	}
	field("allow", out.Allow, false)
	field("reason", out.Reason, out.Reason == "")
	field("policy", out.Policy, out.Policy == "")
	field("policyName", out.PolicyName, out.PolicyName == "")
	field("message", out.Message, out.Message == "")
	field("version", out.Version, false)
	field("exactHost", out.ExactHost, !out.ExactHost)
	field("allowedIps", out.AllowedIPs, len(out.AllowedIPs) == 0)
	_, err := io.WriteString(w, b.String())
	return err
}
