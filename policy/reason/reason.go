// Package reason owns the stable reason codes of stockade's policy
// decisions. They appear in audit events, 403 bodies and DNS audit records
// and are part of the product contract (DESIGN.md, "Policy"). The package is
// deliberately tiny and imports nothing heavy so that audit, boundary and
// client code can name a reason without linking the policy engine.
package reason

// Code is a stable, machine-readable reason for a boundary decision.
type Code string

// The stable reason codes. Never rename one: users grep audit logs for them.
const (
	// None is the reason of an allowed decision.
	None Code = ""
	// EndpointNotAllowed: no policy lists this host and port.
	EndpointNotAllowed Code = "endpoint_not_allowed"
	// BinaryNotAllowed: a policy lists the endpoint, but not for this binary
	// or any of its ancestors.
	BinaryNotAllowed Code = "binary_not_allowed"
	// BinaryChanged: a process of the connection ran another program when
	// its request was complete than when the connection was made (an exec
	// between its connect and its last request byte), exited, or another
	// process took the socket meanwhile: the binary the policy would judge
	// is not the one that wrote the request.
	BinaryChanged Code = "binary_changed"
	// BinaryTampered: the policy allows the binary, but a process of the
	// connection runs code the policy cannot vouch for: it maps executable
	// code from a file the workload can write (a preloaded library from
	// the workspace or /tmp, a memory file), or it is traced.
	BinaryTampered Code = "binary_tampered"
	// IdentityUnavailable: the peer process behind a connection could not be
	// identified (the lookup failed, timed out or panicked).
	IdentityUnavailable Code = "identity_unavailable"
	// PolicyDNSIneligible: a DNS name that no policy lists.
	PolicyDNSIneligible Code = "policy_dns_ineligible"
	// InternalAddressBlocked: the destination resolved to a link-local,
	// metadata, unspecified, loopback or (without allowed_ips) private address.
	InternalAddressBlocked Code = "internal_address_blocked"
	// PolicyUnavailable: no valid policy is loaded; everything is denied.
	PolicyUnavailable Code = "policy_unavailable"
	// BoundaryFault: the boundary itself failed while handling the request.
	BoundaryFault Code = "boundary_fault"
	// UpstreamUnreachable: the decision allowed the request but the upstream
	// could not be reached (HTTP 502; not a policy denial).
	UpstreamUnreachable Code = "upstream_unreachable"
	// ConnectionLimit: the sandbox already has its maximum of concurrent
	// mediated connections or DNS queries (HTTP 503, DNS REFUSED; not a
	// policy denial).
	ConnectionLimit Code = "connection_limit"
)

// All lists every code except None, in a stable order (for tests and docs).
func All() []Code {
	return []Code{
		EndpointNotAllowed, BinaryNotAllowed, BinaryChanged, BinaryTampered, IdentityUnavailable,
		PolicyDNSIneligible, InternalAddressBlocked, PolicyUnavailable,
		BoundaryFault, UpstreamUnreachable, ConnectionLimit,
	}
}

// String returns the code as it appears on the wire, or "-" for None.
func (c Code) String() string {
	if c == None {
		return "-"
	}
	return string(c)
}
