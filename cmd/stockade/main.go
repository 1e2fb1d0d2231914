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
		Use:           "stockade",
		Short:         "Run untrusted programs behind a policy boundary",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().String("log-format", "auto", "log format: json, console, auto (console on a terminal)")
	root.AddCommand(newPolicyCmd(), newBoundaryCmd(), newGatewayCmd(), newSupervisorCmd(), newSandboxCmd(), newClientCmd(), newChaosCmd())
	return root
}
