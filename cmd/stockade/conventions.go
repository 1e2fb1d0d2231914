package main

import (
	"fmt"
	"github.com/stockade-dev/stockade/internal/editdist"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// applyConventions gives the finished command tree the conventions people
// expect of a CLI, whichever file built a command (docs/cli.md):
//
//   - a command group (subcommands, nothing to run) called with an unknown
//     word fails with exit 2 and a suggestion (cobra would print the
//     group's help and exit 0); called alone it prints its help (exit 0);
//   - every command has an Example (examplesOfOthers fills those of the
//     commands whose files set none);
//   - boolean flags show as `--no-wait` in help, not `--no-wait[=true|false]`
//     (what pflag v1.1.0 prints for every bool flag, help included).
func applyConventions(root *cobra.Command) {
	// cobra adds this lazily at Execute; made now, it gets the same care
	// (completion is newCompletionCmd).
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Run, c.RunE = nil, strictHelp
		}
	}
	examples := examplesOfOthers()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SuggestionsMinimumDistance = 2
		if c.HasSubCommands() && !c.Runnable() || c == root {
			c.Args = unknownSubcommand
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
		if c.Example == "" {
			c.Example = examples[c.CommandPath()]
		}
		if c.Flags().Lookup("help") == nil {
			c.Flags().BoolP("help", "h", false, "help for "+c.DisplayName())
			_ = c.Flags().SetAnnotation("help", cobra.FlagSetByCobraAnnotation, []string{"true"})
		}
		plainBools(c.Flags())
		plainBools(c.PersistentFlags())
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand is the Args of a command group: no word, or exit 2
// naming the closest subcommands (by name or alias).
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := suggest(cmd, args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return &exitError{exitUsage, fmt.Errorf("%s (%s --help lists the commands)", msg, cmd.CommandPath())}
}

// strictHelp is `stockade help [command]`: the command's help, or exit 2
// with a suggestion for a word that names no command (cobra's own help
// prints the root's help and exits 0).
func strictHelp(c *cobra.Command, args []string) error {
	target, rest, err := c.Root().Find(args)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if len(rest) > 0 {
		return unknownSubcommand(target, rest)
	}
	return target.Help()
}

// suggest names the available subcommands of cmd closest to word: by
// name or alias, a prefix counts as 0 edits, more than
// SuggestionsMinimumDistance edits (or half the word) is no match, and
// only the closest are
// named; each as "name" or "name (alias a)".
func suggest(cmd *cobra.Command, word string) []string {
	word = strings.ToLower(word)
	// A short word is close to everything: at most half its length.
	limit := min(cmd.SuggestionsMinimumDistance, max(1, len(word)/2))
	best := limit + 1 // nothing found yet
	var out []string
	for _, sub := range cmd.Commands() {
		if !sub.IsAvailableCommand() {
			continue
		}
		d := limit + 1
		for _, cand := range append([]string{sub.Name()}, sub.Aliases...) {
			cand = strings.ToLower(cand)
			if strings.HasPrefix(cand, word) {
				d = 0
			}
			d = min(d, editdist.Distance(word, cand))
		}
		switch {
		case d > limit || d > best:
			continue
		case d < best:
			best, out = d, nil
		}
		s := sub.Name()
		if len(sub.Aliases) > 0 {
			s += " (alias " + strings.Join(sub.Aliases, ", ") + ")"
		}
		out = append(out, s)
	}
	return out
}

// plainBool is a bool flag's value without IsBoolFlag: pflag v1.1.0 shows
// every value with IsBoolFlag as `--flag[=true|false]` in help. Parsing
// does not change: `--flag` alone still means true (NoOptDefVal, set when
// the flag was defined), `--flag=false` still works.
type plainBool struct{ pflag.Value }

func plainBools(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if _, done := f.Value.(plainBool); !done && f.Value.Type() == "bool" {
			f.Value = plainBool{f.Value}
		}
	})
}

// examplesOfOthers are the examples of commands built in files that set
// none, by command path (a command's own Example wins).
func examplesOfOthers() map[string]string {
	return map[string]string{
		"stockade gateway": `  stockade gateway run`,
		"stockade gateway run": `  stockade gateway run
  stockade gateway run --state-dir /var/lib/stockade --listen 192.0.2.10:7420 --metrics 127.0.0.1:9090
  stockade gateway run --ready-file /run/stockade/ready.json &`,
		"stockade boundary": `  stockade boundary serve --policy examples/policy.yaml`,
		"stockade boundary serve": `  stockade boundary serve --policy examples/policy.yaml --audit audit.jsonl
  HTTPS_PROXY=http://127.0.0.1:3128 curl -s https://api.github.com/zen
  kill -HUP $(pidof stockade)   # reload the policy`,
		"stockade policy": `  stockade policy check examples/policy.yaml
  stockade policy eval examples/policy.yaml --host api.github.com --port 443 --binary /usr/bin/curl`,
		"stockade policy check": `  stockade policy check examples/policy.yaml`,
		"stockade policy eval": `  stockade policy eval examples/policy.yaml --host api.github.com --port 443 --binary /usr/bin/curl
  stockade policy eval examples/policy.yaml --dns api.github.com -o json`,
		"stockade policy set": `  stockade policy set demo policy.yaml`,
		"stockade policy get": `  stockade policy get demo
  stockade policy get demo --rev 1 > old.yaml`,
		"stockade sandbox exec": `  stockade sandbox exec demo -- uname -a
  echo hello | stockade sandbox exec demo -- cat
  stockade sandbox exec demo --tty -- /bin/sh`,
		"stockade sandbox connect":   `  stockade sandbox connect demo`,
		"stockade sandbox ssh-proxy": `  ssh -o ProxyCommand='stockade sandbox ssh-proxy demo' sandbox@demo`,
		"stockade sandbox ssh-config": `  stockade sandbox ssh-config demo >> ~/.ssh/config
  ssh demo
  scp notes.txt demo:/sandbox/`,
		"stockade help": `  stockade help sandbox create`,
	}
}
