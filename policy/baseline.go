package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/stockade-dev/stockade/contract"
)

// Paths is a pair of filesystem lists as a sandbox sees them.
type Paths struct {
	ReadOnly  []string
	ReadWrite []string
}

// Baseline returns what every sandbox may use whatever its policy lists,
// as OpenShell's baseline enrichment does: the read-only paths a process
// needs to run (programs, libraries, configuration, /proc, the random
// devices) and read-write /tmp, /var/tmp, /dev/shm (private tmpfs), the
// workspace /sandbox and the harmless devices. It is merged with the
// policy's own lists in the sandbox's view and in Landlock (a path the
// policy lists keeps the policy's access; a baseline read-write path the
// policy lists, or lists a path beneath, read-only stays read-only; a
// missing one is skipped silently, even under hard_requirement). So a
// network-only policy (no filesystem_policy) runs `sh -c 'echo ok'`.
func Baseline() Paths {
	return Paths{
		ReadOnly: []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc",
			"/dev/urandom", "/dev/random", "/dev/full"},
		ReadWrite: []string{"/tmp", "/var/tmp", "/dev/shm", "/sandbox", "/dev/null", "/dev/zero", "/dev/tty"},
	}
}

// BaselineAdds returns what the baseline adds to p: the baseline paths p
// does not list itself (with the rule of Baseline for read-write paths).
func (p *Policy) BaselineAdds() Paths {
	var ro, rw []string
	if p.Filesystem != nil {
		ro, rw = p.Filesystem.ReadOnly, p.Filesystem.ReadWrite
	}
	listed := func(x string) bool { return slices.Contains(ro, x) || slices.Contains(rw, x) }
	b := Baseline()
	var out Paths
	for _, x := range b.ReadWrite {
		narrower := slices.ContainsFunc(ro, func(q string) bool { return q == x || strings.HasPrefix(q, x+"/") })
		if !narrower && !listed(x) {
			out.ReadWrite = append(out.ReadWrite, x)
		}
	}
	for _, x := range b.ReadOnly {
		if !listed(x) && !slices.Contains(out.ReadWrite, x) {
			out.ReadOnly = append(out.ReadOnly, x)
		}
	}
	return out
}

// LoopbackHosts returns the loopback hosts among the policy's endpoints
// that a workload's NO_PROXY names by default ("localhost", "127.0.0.1"):
// the supervisor leaves them out of NO_PROXY, so a request to them goes
// through the boundary (audited, and allowed or denied with a reason)
// instead of failing on the sandbox's own loopback with nothing audited.
func (p *Policy) LoopbackHosts() []string {
	var out []string
	for _, np := range p.NetworkPolicies {
		for _, ep := range np.Endpoints {
			if (ep.Host == "localhost" || ep.Host == "127.0.0.1") && !slices.Contains(out, ep.Host) {
				out = append(out, ep.Host)
			}
		}
	}
	return out
}

// BoundaryWarnings names the endpoints the boundary refuses to dial
// whatever the policy says (DESIGN.md's internal-address rules, in
// boundary/proxy.CheckAddr and CheckPort), each with file:line:col and the
// way to allow it where there is one: a loopback host (allowed only when
// the gateway runs with --allow-loopback-upstream), a private address
// outside the endpoint's own allowed_ips, a link-local, metadata,
// multicast or unspecified address (never), a control-plane port on an
// exact host (never).
func (p *Policy) BoundaryWarnings() []Notice {
	var out []Notice
	for _, np := range p.NetworkPolicies {
		for _, ep := range np.Endpoints {
			warn := func(format string, a ...any) {
				out = append(out, Notice{File: p.File, Line: ep.Line, Col: ep.Col,
					Msg: fmt.Sprintf("warning: network_policies.%s: endpoint %s: ", np.Key, ep.Host) + fmt.Sprintf(format, a...)})
			}
			if msg := addressWarning(ep); msg != "" {
				warn("%s", msg)
			}
			if !ep.Wildcard {
				for _, port := range ep.Ports {
					if contract.IsControlPlanePort(int(port)) {
						warn("port %d is a control-plane port (etcd, Kubernetes API, kubelet): the boundary never dials it for a named host", port)
					}
				}
			}
		}
	}
	return out
}

// addressWarning says why the boundary refuses ep's host when the host is
// an address (or localhost), or "".
func addressWarning(ep *Endpoint) string {
	if ep.Host == "localhost" || strings.HasSuffix(ep.Host, ".localhost") {
		return loopbackWarning
	}
	a, err := netip.ParseAddr(strings.Trim(ep.Host, "[]"))
	if err != nil {
		return ""
	}
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return loopbackWarning
	case a.IsUnspecified():
		return "an unspecified address: the boundary never dials it"
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a == netip.MustParseAddr("fd00:ec2::254"):
		return "a link-local or metadata address: the boundary never dials it"
	case a.IsMulticast():
		return "a multicast address: the boundary never dials it"
	}
	if len(ep.AllowedIPs) > 0 && !slices.ContainsFunc(ep.AllowedIPs, func(pf netip.Prefix) bool { return pf.Contains(a) }) {
		return fmt.Sprintf("%s is not in the endpoint's own allowed_ips, so the boundary refuses it: add %s/%d to allowed_ips", a, a, a.BitLen())
	}
	return ""
}

const loopbackWarning = "a loopback address: the gateway blocks loopback upstreams by default (internal_address_blocked); " +
	"to allow it, run the gateway with `stockade gateway run --allow-loopback-upstream` (a standalone boundary: " +
	"`stockade boundary serve --allow-loopback-upstream`); requests to it from a sandbox go through the boundary (NO_PROXY leaves it out)"
