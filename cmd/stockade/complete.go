package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/messages"
)

// completeTimeout bounds the gateway round trip of a completion: a shell
// waiting on Tab must not hang on a gateway that does not answer.
const completeTimeout = 2 * time.Second

// completeSandboxNames completes sandbox names (every argument; names
// already given are left out) by asking the gateway the command's client
// flags name (--gateway, --config, --state-dir, read from the command's
// flags, so it works for any command that has them). On any error it
// offers nothing, quietly.
func completeSandboxNames(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	names, err := sandboxNames(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) && !slices.Contains(args, n) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeFirstSandboxName completes a sandbox name as the first argument
// only; later arguments get the shell's default completion (files).
func completeFirstSandboxName(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return completeSandboxNames(cmd, args, toComplete)
}

// sandboxNames lists the gateway's sandboxes for a completion.
func sandboxNames(cmd *cobra.Command) ([]string, error) {
	var co clientOpts
	f := cmd.Flags()
	co.gateway, _ = f.GetString("gateway")
	co.config, _ = f.GetString("config")
	co.stateDir, _ = f.GetString("state-dir")
	if co.stateDir == "" {
		co.stateDir = client.DefaultStateDir()
	}
	c, err := co.dial(cmd)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	reply, err := requestCtx(ctx, c, &messages.ListRequest{})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range reply.Sandboxes {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names, nil
}

// newCompletionCmd is `stockade completion SHELL` (cobra's scripts; made
// here rather than by cobra so it writes to the command's output and has
// the conventions of every other command).
func newCompletionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "completion",
		Short: "Print the shell completion script for bash, zsh, fish or powershell",
		Long: `Print the completion script for a shell. It completes commands, flags,
-o values and sandbox names (asking the gateway the command line names, with
a 2 s limit; nothing is offered when it does not answer).`,
		Example: `  source <(stockade completion bash)
  stockade completion zsh > "${fpath[1]}/_stockade"
  stockade completion fish > ~/.config/fish/completions/stockade.fish`,
	}
	var noDesc bool
	shells := []struct {
		name, example string
		gen           func(c *cobra.Command) error
	}{
		{"bash", `  source <(stockade completion bash)
  stockade completion bash > /etc/bash_completion.d/stockade`, func(c *cobra.Command) error {
			return c.Root().GenBashCompletionV2(c.OutOrStdout(), !noDesc)
		}},
		{"zsh", `  stockade completion zsh > "${fpath[1]}/_stockade"`, func(c *cobra.Command) error {
			if noDesc {
				return c.Root().GenZshCompletionNoDesc(c.OutOrStdout())
			}
			return c.Root().GenZshCompletion(c.OutOrStdout())
		}},
		{"fish", `  stockade completion fish > ~/.config/fish/completions/stockade.fish`, func(c *cobra.Command) error {
			return c.Root().GenFishCompletion(c.OutOrStdout(), !noDesc)
		}},
		{"powershell", `  stockade completion powershell | Out-String | Invoke-Expression`, func(c *cobra.Command) error {
			if noDesc {
				return c.Root().GenPowerShellCompletion(c.OutOrStdout())
			}
			return c.Root().GenPowerShellCompletionWithDesc(c.OutOrStdout())
		}},
	}
	for _, sh := range shells {
		gen := sh.gen
		sub := &cobra.Command{
			Use:               sh.name,
			Short:             "Print the completion script for " + sh.name,
			Example:           sh.example,
			Args:              cobra.NoArgs,
			ValidArgsFunction: cobra.NoFileCompletions,
			RunE:              func(c *cobra.Command, _ []string) error { return gen(c) },
		}
		sub.Flags().BoolVar(&noDesc, "no-descriptions", false, "leave out the descriptions of completions")
		cmd.AddCommand(sub)
	}
	return cmd
}
