package policy

import (
	"fmt"
	"net/netip"
)

// Policy is a parsed, valid OpenShell v1 policy. It is immutable once
// returned by Parse: the Engine shares it between decisions.
type Policy struct {
	// File is the name the policy was loaded under (used in positions).
	File string
	// Version is the schema version; always 1.
	Version int
	// Filesystem is nil when the file has no filesystem_policy.
	Filesystem *FilesystemPolicy
	// Landlock always has a compatibility (best_effort when not given).
	Landlock Landlock
	// Process is the identity of the workload; empty fields mean "let the
	// driver choose".
	Process Process
	// NetworkPolicies in file order.
	NetworkPolicies []*NetworkPolicy
	// Middlewares are network_middlewares entries, kept, not enforced.
	Middlewares []Field
	// Stockade holds stockade's extensions (the "stockade" section).
	Stockade Extensions

	notices []Notice
}

// Notices returns what was accepted but is not enforced (or does less than
// it seems), each with file:line:col, in file order.
func (p *Policy) Notices() []Notice {
	return append([]Notice(nil), p.notices...)
}

// EndpointCount is the number of endpoints over all network policies.
func (p *Policy) EndpointCount() int {
	n := 0
	for _, np := range p.NetworkPolicies {
		n += len(np.Endpoints)
	}
	return n
}

// Extensions is the "stockade" section: stockade's own keys, which
// OpenShell's schema does not have (OpenShell refuses them).
type Extensions struct {
	// AllowPtrace (stockade.allow_ptrace) lets the sandbox's processes use
	// ptrace, process_vm_readv and process_vm_writev on one another. By
	// default the workload's seccomp filter refuses them (EPERM): with
	// them one process acts through another, an allowed binary included.
	// Like the filesystem policy, it applies when the sandbox starts.
	AllowPtrace bool
	// AllowPtraceAt is where the file sets it (the zero Position: not set).
	AllowPtraceAt Position
}

// Position is a place in a policy file (line and column from 1).
type Position struct {
	Line, Col int
}

// FilesystemPolicy is the Landlock filesystem section.
type FilesystemPolicy struct {
	IncludeWorkdir bool
	ReadOnly       []string
	ReadWrite      []string
}

// Compatibility is landlock.compatibility.
type Compatibility int

// Landlock compatibility modes. Values are explicit and stable.
const (
	// BestEffort skips what the kernel or a path does not allow, with a warning.
	BestEffort Compatibility = 1
	// HardRequirement fails the sandbox start instead.
	HardRequirement Compatibility = 2
)

// String returns the YAML spelling of the mode.
func (c Compatibility) String() string {
	switch c {
	case BestEffort:
		return "best_effort"
	case HardRequirement:
		return "hard_requirement"
	default:
		return fmt.Sprintf("compatibility(%d)", int(c))
	}
}

// Landlock is the landlock section.
type Landlock struct {
	Compatibility Compatibility
}

// Process is the process section. Values are kept as written (a name such
// as "sandbox" or a number).
type Process struct {
	RunAsUser  string
	RunAsGroup string
}

// NetworkPolicy is one entry of network_policies.
type NetworkPolicy struct {
	// Key is the map key in network_policies. Decisions, audit events and
	// 403 bodies report it as policy (as OpenShell).
	Key string
	// Name is the name field, or Key when the file gives none; reported
	// beside the key as policyName.
	Name      string
	Endpoints []*Endpoint
	Binaries  []Binary
	Line, Col int
}

// Endpoint is one host and its ports within a network policy.
type Endpoint struct {
	// Host is lower-case without a trailing dot, or "" for a host-less
	// endpoint (allowed_ips required: any name on Ports, the resolved
	// addresses checked against AllowedIPs). Wildcard: Host is a pattern in
	// OpenShell's language ('*' within a label, a first label "**" for one
	// or more labels, '?', "[...]"; see hostPattern).
	Host     string
	Wildcard bool
	// Ports from port or ports, each 1-65535.
	Ports []uint16
	// AllowedIPs permits destinations in private ranges (a bare address
	// in the file is a /32 or /128).
	AllowedIPs []netip.Prefix
	// Kept, not enforced: the boundary decides on host, port and binary.
	Protocol    string
	TLS         string
	Enforcement string
	Access      string
	// Unenforced holds every other accepted field (rules, deny_rules,
	// credential settings, ...) as decoded YAML.
	Unenforced []Field
	Line, Col  int
}

// Binary is one entry of a policy's binaries: an absolute path, or a glob
// where * stays within one path segment and ** crosses segments.
type Binary struct {
	Path      string
	Glob      bool
	Line, Col int
}

// Field is an accepted field kept as decoded YAML (maps, lists, scalars).
type Field struct {
	Key       string
	Value     any
	Line, Col int
}
