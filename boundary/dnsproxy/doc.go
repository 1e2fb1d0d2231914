// Package dnsproxy owns the DNS logic of the policy boundary, without
// actors: how one query is checked, decided, forwarded and answered
// (Answerer), the upstreams it forwards to (Forwarder over UDP with TCP
// fallback, the system resolv.conf, a static hosts file), and the replies
// for queries that never reach a decision (FORMERR, SERVFAIL, REFUSED).
//
// The boundary wires each query into its own query actor and runs the
// miekg/dns server; this package gives that actor a single call, Answer,
// which returns the reply and an Outcome for the audit event. The policy
// engine is reached through the small Decider interface so that this
// package never links OPA.
//
// Rcodes (DESIGN.md, "Network boundary"):
//
//	allowed name            upstream's rcode (NOERROR, NXDOMAIN, ...)
//	name in no policy       REFUSED   reason policy_dns_ineligible (or the verdict's reason)
//	malformed query         FORMERR   (BADVERS for EDNS version > 0)
//	unsupported opcode      NOTIMP
//	upstream error/timeout  SERVFAIL  reason upstream_unreachable, Allowed stays true
//	boundary fault          SERVFAIL  reason boundary_fault
package dnsproxy
