// Command stockade is the one binary of stockade: the standalone egress
// boundary (`boundary serve`), the policy tools (`policy check|eval`), and,
// as the design grows, the gateway, the supervisor and the client verbs.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/sandbox/nsrun"
)

// Exit codes (package contract; README.md lists them).
const (
	exitOK          = contract.ExitOK
	exitFailure     = contract.ExitFailure
	exitUsage       = contract.ExitUsage
	exitNotFound    = contract.ExitNotFound
	exitRefused     = contract.ExitRefused
	exitUnreachable = contract.ExitUnreachable
)

// exitError carries an exit code up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// A re-exec'd sandbox stage (init or exec) runs here and never returns.
	nsrun.MaybeRunStage()
	logx.ConfigureGlobals()
	root := newRootCmd()
	err := root.Execute()
	if err == nil {
		os.Exit(exitOK)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" { // nil: the remote command's status, nothing to say
			fmt.Fprintln(os.Stderr, "stockade:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "stockade:", err)
	os.Exit(exitUsage)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "stockade",
		Short: "Run untrusted programs behind a policy boundary",
		Long: `stockade runs untrusted programs in sandboxes behind a policy boundary: a
gateway keeps the sandboxes (one supervisor each), every outgoing
connection and DNS query goes through an egress boundary that allows only
what the policy lists. docs/cli.md is the reference of every command, flag,
exit code and JSON key.

Exit codes: 0 done, 1 the verb failed, 2 bad flags or arguments (or an
unknown command), 3 not found, 4 refused (wrong phase, not allowed), 5 no
gateway answering.`,
		Example: `  stockade gateway run &
  stockade sandbox create demo --policy examples/policy.yaml
  stockade sandbox exec demo -- curl -s https://api.github.com/zen
  stockade sandbox list -w`,
		Version:       buildVersion().line(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().String("log-format", "auto", "log format: json, console, auto (console on a terminal)")
	root.Flags().Bool("version", false, "print the version on one line and exit")
	root.AddCommand(newPolicyCmd(), newBoundaryCmd(), newGatewayCmd(), newSupervisorCmd(), newSandboxCmd(), newClientCmd(), newClusterCmd(), newChaosCmd(), newVersionCmd(), newCompletionCmd())
	// policy set and get (policy_cmd.go) take a sandbox name first.
	for _, path := range [][]string{{"policy", "set"}, {"policy", "get"}} {
		if c, _, err := root.Find(path); err == nil && c.Name() == path[1] && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeFirstSandboxName
		}
	}
	if c, _, err := root.Find([]string{"policy", "eval"}); err == nil && c.Name() == "eval" && c.Flags().Lookup("output") != nil {
		if _, ok := c.GetFlagCompletionFunc("output"); !ok {
			_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	applyConventions(root)
	return root
}
