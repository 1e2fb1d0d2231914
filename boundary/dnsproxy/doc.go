// Package dnsproxy owns the DNS logic of the policy boundary, without
// actors: how one query is checked, decided, forwarded and answered
// (Answerer), the upstreams it forwards to (Forwarder over UDP with TCP
// fallback, the system resolv.conf, a static hosts file), and the replies
// for queries that never reach a decision (FORMERR, SERVFAIL, REFUSED).
//
// The boundary answers queries in its query actors; this package gives
// them Answer, which takes a miekg/dns message and returns the reply and an
// Outcome for the audit event. For the common UDP query there is a fast
// path without messages: ParseQuery reads the packet and AnswerPacket
// appends the reply bytes, with the same fault points, decision, reply and
// Outcome as Answer. An allowed name whose upstream is not a LocalUpstream
// (Hosts is one) is left pending by AnswerPacket and finished by Forward,
// so that a batch of queries never waits on an upstream exchange. The
// policy engine is reached through the small Decider interface so that
// this package never links OPA.
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
