package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// versionView is `stockade version -o json|yaml` (docs/cli.md). Empty
// values are omitted: a binary built without VCS information (go run, a
// test binary) has no commit or commitTime, and modified only when true.
type versionView struct {
	Version    string `json:"version" yaml:"version"`
	Commit     string `json:"commit,omitempty" yaml:"commit,omitempty"`
	CommitTime string `json:"commitTime,omitempty" yaml:"commitTime,omitempty"`
	Modified   bool   `json:"modified,omitempty" yaml:"modified,omitempty"`
	GoVersion  string `json:"goVersion" yaml:"goVersion"`
	Platform   string `json:"platform" yaml:"platform"`
}

// versionOf reads the version of this binary from its build information:
// the main module's version (a tag, or the pseudo-version the go command
// derives from the commit; "(devel)" when it could not), vcs.revision,
// vcs.time and vcs.modified, and the Go version it was built with. bi nil:
// no build information (then "unknown").
func versionOf(bi *debug.BuildInfo) versionView {
	v := versionView{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// buildVersion is this binary's version.
func buildVersion() versionView {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return versionOf(nil)
	}
	return versionOf(bi)
}

// line is the one-line form (`stockade --version`):
//
//	stockade v0.0.0-20261130224907-0123456789ab+dirty (commit 0123456789ab, 2026-11-30T22:49:07Z, modified) go1.26.0 linux/amd64
func (v versionView) line() string {
	s := "stockade " + v.Version
	if v.Commit != "" {
		s += " (commit " + shortCommit(v.Commit)
		if v.CommitTime != "" {
			s += ", " + v.CommitTime
		}
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + v.GoVersion + " " + v.Platform
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func newVersionCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "version [-o table|json|yaml]",
		Short: "Print the version: module version, commit, Go version",
		Long: `Print the version of this binary, read from its build information: the
module version (a release tag, or a pseudo-version made from the commit),
the commit, its time, whether the tree had uncommitted changes, and the Go
version and platform it was built with. stockade --version prints the same
on one line.`,
		Example: `  stockade version
  stockade --version
  stockade version -o json | jq -r .commit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := buildVersion()
			return render(cmd.OutOrStdout(), format, v, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "version\t%s\ncommit\t%s\ncommitTime\t%s\nmodified\t%t\ngoVersion\t%s\nplatform\t%s\n",
					v.Version, dash(v.Commit), dash(v.CommitTime), v.Modified, v.GoVersion, v.Platform)
			})
		},
	}
	addOutputFlag(cmd, &format, "table", "table", "json", "yaml")
	return cmd
}
