package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/policy"
)

// newPolicyCmd returns `stockade policy` with the local, offline verbs
// check and eval (set/get talk to a gateway and live elsewhere).
func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Validate and evaluate sandbox policies (OpenShell v1 YAML)",
	}
	cmd.AddCommand(newPolicyCheckCmd(), newPolicyEvalCmd())
	return cmd
}

// loadPolicyFile loads FILE into a fresh engine. An invalid policy prints
// every error to stderr, one per line, and exits 2.
func loadPolicyFile(cmd *cobra.Command, file string) (*policy.Engine, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("read policy: %w", err)}
	}
	e := policy.NewEngine()
	if _, err := e.Load(file, data); err != nil {
		var list policy.ErrorList
		if !errors.As(err, &list) {
			return nil, &exitError{code: exitUsage, err: err}
		}
		for _, pe := range list {
			fmt.Fprintln(cmd.ErrOrStderr(), pe.Error())
		}
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("%s: invalid policy (%d errors)", file, len(list))}
	}
	return e, nil
}

func newPolicyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy; print every error with file:line:col",
		Long: `Validate a policy file.

Exit 0 when valid: prints "FILE: valid (N network policies, M endpoints)"
and one line per field that is accepted but not enforced (L7 rules,
protocol, tls, middlewares, ...), each with file:line:col.
Exit 2 when invalid (or unreadable): every error goes to stderr, one per
line, as file:line:col: message.`,
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
			return nil
		},
	}
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
engine the boundary uses, and print it (allow, reason, policy, message,
version; for an allowed connection also exact_host and allowed_ips).

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

// decisionJSON is the -o json shape; keys are stable.
type decisionJSON struct {
	Allow      bool           `json:"allow"`
	Reason     string         `json:"reason"`
	Policy     string         `json:"policy"`
	Message    string         `json:"message"`
	Version    uint64         `json:"version"`
	ExactHost  bool           `json:"exactHost"`
	AllowedIPs []netip.Prefix `json:"allowedIps"`
}

func printDecision(w io.Writer, format string, d policy.Decision, network bool) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(decisionJSON{
			Allow: d.Allow, Reason: string(d.Reason), Policy: d.Policy, Message: d.Message,
			Version: d.Version, ExactHost: d.ExactHost, AllowedIPs: append([]netip.Prefix{}, d.AllowedIPs...),
		})
	}
	verdict := "DENY"
	if d.Allow {
		verdict = "ALLOW"
	}
	_, err := fmt.Fprintf(w, "decision     %s\nreason       %s\npolicy       %s\nmessage      %s\nversion      %d\n",
		verdict, d.Reason, d.Policy, d.Message, d.Version)
	if err == nil && d.Allow && network {
		_, err = fmt.Fprintf(w, "exact_host   %v\nallowed_ips  %v\n", d.ExactHost, d.AllowedIPs)
	}
	return err
}
