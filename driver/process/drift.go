package process

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/contract"

	"github.com/stockade-dev/stockade/sandbox/spec"
)

// defaultMaxConns is what a supervisor applies for MaxConns 0
// (actors/boundary.DefaultMaxConns; not imported: no actors here).
const defaultMaxConns = 1024

// Drift says, for a supervisor an earlier gateway started (Adopt), that the
// gateway's boundary settings changed since it started and a stop and start
// applies them: "gateway settings changed since this sandbox started
// (allow-loopback-upstream): stop and start it to apply". "" when they are
// the same, for a supervisor this gateway started, and when its spec file
// cannot be read (nothing to compare).
//
// A supervisor reads its boundary settings once, from the spec file the
// driver wrote at its start; a re-adopted one keeps them.
func (p *proc) Drift() string { return p.drift }

// drift compares the boundary settings in the spec file of the supervisor
// of name (written at its start) with those this driver would write now.
func (d *Driver) drift(name string) string {
	root, err := d.sandboxes()
	if err != nil {
		return ""
	}
	defer root.Close()
	rel := filepath.Join(name, contract.SpecFileName)
	b, err := root.ReadFile(rel)
	if err != nil {
		return ""
	}
	running, err := spec.Decode(rel, b)
	if err != nil {
		return ""
	}
	c := d.cfg
	var changed []string
	if running.AllowLoopback != c.AllowLoopback {
		changed = append(changed, "allow-loopback-upstream")
	}
	if running.Hosts != c.Hosts {
		changed = append(changed, "hosts")
	}
	if running.DNSUpstream != c.DNSUpstream {
		changed = append(changed, "dns-upstream")
	}
	if orDefault(running.MaxConns) != orDefault(c.MaxConns) {
		changed = append(changed, "max-conns")
	}
	if running.Unconfined != c.Unconfined {
		changed = append(changed, "bench-unconfined")
	}
	if running.Chaos != c.Chaos {
		changed = append(changed, "chaos")
	}
	if len(changed) == 0 {
		return ""
	}
	return fmt.Sprintf("gateway settings changed since this sandbox started (%s): stop and start it to apply", strings.Join(changed, ", "))
}

func orDefault(maxConns int) int {
	if maxConns <= 0 {
		return defaultMaxConns
	}
	return maxConns
}
