package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// tool is an external program the harness needs and the Debian package
// that provides it.
type tool struct {
	name    string
	pkg     string
	version []string // arguments that make it print its version
	marker  string   // line prefix holding the version; "" = first line
}

func requiredTools() []tool {
	return []tool{
		{name: "go", pkg: "golang-go (or a Go toolchain on PATH)", version: []string{"version"}},
		{name: "tinyproxy", pkg: "tinyproxy", version: []string{"-v"}},
		{name: "dnsmasq", pkg: "dnsmasq", version: []string{"-v"}},
		{name: "dnsperf", pkg: "dnsperf", version: []string{"-h"}, marker: "Version "},
	}
}

// Tools maps each required tool to its resolved path and version line.
type Tools struct {
	Path    map[string]string
	Version map[string]string
}

// CheckTools finds every required tool (also in /usr/sbin, where dnsmasq
// lives, when PATH lacks it) and returns one error naming each missing
// tool's package. It installs nothing.
func CheckTools(ctx context.Context) (Tools, error) {
	return checkTools(ctx, nil)
}

// checkTools is CheckTools for the named tools only (nil: all of them).
func checkTools(ctx context.Context, only []string) (Tools, error) {
	t := Tools{Path: map[string]string{}, Version: map[string]string{}}
	var missing []string
	for _, tl := range requiredTools() {
		if only != nil && !slices.Contains(only, tl.name) {
			continue
		}
		p, err := exec.LookPath(tl.name)
		if err != nil {
			if p, err = exec.LookPath("/usr/sbin/" + tl.name); err != nil {
				missing = append(missing, fmt.Sprintf("%s (Debian package: %s)", tl.name, tl.pkg))
				continue
			}
		}
		t.Path[tl.name] = p
		t.Version[tl.name] = versionLine(ctx, p, tl)
	}
	if len(missing) > 0 {
		return t, fmt.Errorf("missing tools: %s; install them (e.g. apt-get install -y tinyproxy dnsmasq dnsperf) and rerun",
			strings.Join(missing, ", "))
	}
	return t, nil
}

func versionLine(ctx context.Context, path string, tl tool) string {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, tl.version...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && !errors.As(err, new(*exec.ExitError)) {
		return "unknown"
	}
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSpace(line)
		if tl.marker == "" && line != "" {
			return line
		}
		if tl.marker != "" && strings.HasPrefix(line, tl.marker) {
			return strings.TrimPrefix(line, tl.marker)
		}
	}
	return "unknown"
}
