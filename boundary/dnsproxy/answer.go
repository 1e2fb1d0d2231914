package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

// DefaultTimeout bounds one Answer (decision and upstream exchange) when
// Answerer.Timeout is zero. It stays under the 5 s a glibc stub waits, so
// the client sees SERVFAIL rather than its own timeout.
const DefaultTimeout = 4 * time.Second

// ednsUDPSize is the UDP payload size this boundary advertises, both to its
// clients and to its upstreams (the DNS flag day 2020 value).
const ednsUDPSize = 1232

// ErrMalformed is wrapped by Outcome.Err for queries answered FORMERR,
// NOTIMP or BADVERS.
var ErrMalformed = errors.New("malformed dns query")

// Verdict is what the policy says about a DNS name.
type Verdict struct {
	Allow   bool
	Reason  reason.Code // why not, when !Allow; empty means policy_dns_ineligible
	Policy  string      // the network_policies key of the policy that decided, if any
	Version uint64      // the policy version that decided
	// PolicyName is that policy's name field when it differs from the key.
	PolicyName string
	Message    string // human-readable detail for the audit line
}

// Decider decides whether a DNS name may be resolved. name is normalised
// (lowercase, no trailing dot). Implementations fail closed: a decider that
// cannot decide returns a deny with reason policy_unavailable.
type Decider interface {
	DecideDNS(ctx context.Context, name string, qtype uint16) Verdict
}

// Upstream resolves a query on behalf of the boundary. Exchange returns the
// upstream's response, whatever its rcode, or an error when no response
// could be had. String names the upstream for audit events.
type Upstream interface {
	Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error)
	String() string
}

// Transport is the transport a query came in on; it sets the size limit
// of the reply. The zero value is UDP, the stricter limit.
type Transport int

// Transports. Values are explicit and stable.
const (
	UDP Transport = 0
	TCP Transport = 1
)

// String returns "udp" or "tcp".
func (t Transport) String() string {
	switch t {
	case UDP:
		return "udp"
	case TCP:
		return "tcp"
	default:
		return fmt.Sprintf("transport(%d)", int(t))
	}
}

// TransportOf maps a net.Addr network name ("udp", "tcp4", ...) to a
// Transport; anything not TCP is UDP.
func TransportOf(network string) Transport {
	if strings.HasPrefix(network, "tcp") {
		return TCP
	}
	return UDP
}

// Disposition says how a query was handled; it picks the audit event's
// action and disposition.
type Disposition int

// Dispositions. Values are explicit and stable (they appear in audit).
const (
	// DispositionUnknown is the zero value; Answer never returns it.
	DispositionUnknown Disposition = 0
	// DispositionAnswered: allowed, and the upstream's answer was relayed
	// (whatever its rcode, e.g. NXDOMAIN).
	DispositionAnswered Disposition = 1
	// DispositionRefused: the policy denied the name (REFUSED).
	DispositionRefused Disposition = 2
	// DispositionMalformed: the query was malformed or unsupported
	// (FORMERR, NOTIMP, BADVERS); no decision was made.
	DispositionMalformed Disposition = 3
	// DispositionUpstreamFailed: allowed, but the upstream failed or timed
	// out (SERVFAIL, reason upstream_unreachable). Not a policy denial.
	DispositionUpstreamFailed Disposition = 4
	// DispositionFault: the boundary itself failed (SERVFAIL, reason
	// boundary_fault).
	DispositionFault Disposition = 5
)

// String returns the disposition's name.
func (d Disposition) String() string {
	switch d {
	case DispositionUnknown:
		return "unknown"
	case DispositionAnswered:
		return "answered"
	case DispositionRefused:
		return "refused"
	case DispositionMalformed:
		return "malformed"
	case DispositionUpstreamFailed:
		return "upstream_failed"
	case DispositionFault:
		return "fault"
	default:
		return fmt.Sprintf("disposition(%d)", int(d))
	}
}

// Outcome describes how one query was handled, for the audit event.
//
// Allowed is the policy's verdict (false when no decision was made).
// Reason is empty for answered queries, the verdict's reason for refused
// ones, upstream_unreachable when an allowed name's upstream failed and
// boundary_fault for faults. Err is set for malformed queries (wrapping
// ErrMalformed), upstream failures and faults.
type Outcome struct {
	Name        string // normalised query name ("" when there is no question)
	QType       uint16
	Rcode       int // rcode of the reply actually returned
	Disposition Disposition
	Allowed     bool
	Reason      reason.Code
	Policy      string
	PolicyName  string // the policy's name field when it differs from Policy (its key)
	Version     uint64
	Message     string
	Upstream    string // the upstream asked, if any
	Err         error
}

// Answerer answers DNS queries under a policy. Its zero value refuses
// every name with policy_unavailable. It is safe for concurrent use when
// its Decider, Upstream and Injector are.
type Answerer struct {
	Decider  Decider
	Upstream Upstream
	Injector fault.Injector // nil means fault.Nop{}
	Timeout  time.Duration  // per query; 0 means DefaultTimeout
}

// Answer builds the reply to one query that arrived over tr. It calls the
// injector at fault.DNSQuery first and at fault.DNSUpstream before the
// upstream exchange. It never panics on its own account; panics of the
// injector, Decider or Upstream propagate to the caller's actor. Answer
// does not modify req. The reply always has req's Id, fits the client's
// size limit (TC set when records had to be dropped) and carries an OPT
// record when req did.
func (a *Answerer) Answer(ctx context.Context, req *dns.Msg, tr Transport) (*dns.Msg, Outcome) {
	var out Outcome
	if req != nil && len(req.Question) > 0 {
		out.Name, _ = Normalize(req.Question[0].Name)
		out.QType = req.Question[0].Qtype
	}
	resp := a.answer(ctx, req, &out)
	fit(resp, req, tr)
	out.Rcode = resp.Rcode
	return resp, out
}

func (a *Answerer) answer(ctx context.Context, req *dns.Msg, out *Outcome) *dns.Msg {
	inj := a.injector()
	if err := inj.Inject(fault.DNSQuery); err != nil {
		out.Disposition, out.Reason, out.Err = DispositionFault, reason.BoundaryFault, fmt.Errorf("dns query: %w", err)
		return ServFail(req)
	}
	if rcode, err := check(req); err != nil {
		out.Disposition, out.Err = DispositionMalformed, err
		return reply(req, rcode)
	}
	q := req.Question[0]
	name, ok := Normalize(q.Name)
	if !ok {
		out.Disposition, out.Reason = DispositionRefused, reason.PolicyDNSIneligible
		out.Message = "name cannot appear in any policy"
		return Refused(req)
	}

	ctx, cancel := a.WithTimeout(ctx)
	defer cancel()
	if !a.decide(ctx, name, q.Qtype, out) {
		return Refused(req)
	}
	return a.resolve(ctx, req, inj, out)
}

// injector returns the Injector, fault.Nop{} when unset.
func (a *Answerer) injector() fault.Injector {
	if a.Injector == nil {
		return fault.Nop{}
	}
	return a.Injector
}

// WithTimeout returns ctx bounded by the per-query timeout (Timeout, or
// DefaultTimeout). Answer applies it itself; a caller answering a batch of
// queries read together with AnswerPacket shares one for the batch.
func (a *Answerer) WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// decide asks the Decider about name and fills out's verdict fields; it
// reports whether the name is allowed (a denial also gets its Disposition
// and Reason).
func (a *Answerer) decide(ctx context.Context, name string, qtype uint16, out *Outcome) bool {
	v := Verdict{Reason: reason.PolicyUnavailable, Message: "no policy decider"}
	if a.Decider != nil {
		v = a.Decider.DecideDNS(ctx, name, qtype)
	}
	out.Allowed, out.Policy, out.PolicyName, out.Version, out.Message = v.Allow, v.Policy, v.PolicyName, v.Version, v.Message
	if !v.Allow {
		out.Disposition, out.Reason = DispositionRefused, v.Reason
		if out.Reason == reason.None {
			out.Reason = reason.PolicyDNSIneligible
		}
	}
	return v.Allow
}

// resolve answers an allowed query from the upstream: SERVFAIL with
// upstream_unreachable when that fails.
func (a *Answerer) resolve(ctx context.Context, req *dns.Msg, inj fault.Injector, out *Outcome) *dns.Msg {
	resp, err := a.forward(ctx, req, inj, out)
	if err != nil {
		out.Disposition, out.Reason, out.Err = DispositionUpstreamFailed, reason.UpstreamUnreachable, err
		return ServFail(req)
	}
	out.Disposition = DispositionAnswered
	return resp
}

// Forward finishes a query that AnswerPacket left pending (allowed, for an
// upstream that is not a LocalUpstream): the upstream exchange, after the
// injector at fault.DNSUpstream, and the reply, as Answer does for an
// allowed name. req is the query's packet unpacked with miekg/dns and out
// the Outcome AnswerPacket returned (the decision stands; fault.DNSQuery is
// not called again). The reply fits the client's limit for tr.
func (a *Answerer) Forward(ctx context.Context, req *dns.Msg, tr Transport, out Outcome) (*dns.Msg, Outcome) {
	ctx, cancel := a.WithTimeout(ctx)
	defer cancel()
	resp := a.resolve(ctx, req, a.injector(), &out)
	fit(resp, req, tr)
	out.Rcode = resp.Rcode
	return resp, out
}

// forward asks the upstream with a fresh query (new random Id, the client's
// question, CD and DO bits) and relays its answer under req's header.
func (a *Answerer) forward(ctx context.Context, req *dns.Msg, inj fault.Injector, out *Outcome) (*dns.Msg, error) {
	if a.Upstream == nil {
		return nil, errors.New("dns upstream: none configured")
	}
	out.Upstream = a.Upstream.String()
	if err := inj.Inject(fault.DNSUpstream); err != nil {
		return nil, fmt.Errorf("dns upstream %s: %w", out.Upstream, err)
	}
	return a.exchange(ctx, req, out)
}

// exchange is forward past its fault point.
func (a *Answerer) exchange(ctx context.Context, req *dns.Msg, out *Outcome) (*dns.Msg, error) {
	q := req.Question[0]
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	up := new(dns.Msg)
	up.SetQuestion(q.Name, q.Qtype)
	up.CheckingDisabled = req.CheckingDisabled
	up.SetEdns0(ednsUDPSize, do)

	resp, err := a.Upstream.Exchange(ctx, up)
	switch {
	case err != nil:
		return nil, err
	case resp == nil:
		return nil, fmt.Errorf("dns upstream %s: no response", out.Upstream)
	case resp.Rcode > 0xF:
		// An extended rcode (e.g. BADVERS) concerns our hop, not the client's.
		return nil, fmt.Errorf("dns upstream %s: extended rcode %s", out.Upstream, dns.RcodeToString[resp.Rcode])
	}
	m := reply(req, resp.Rcode)
	m.AuthenticatedData = resp.AuthenticatedData && (do || req.AuthenticatedData)
	m.Answer, m.Ns = resp.Answer, resp.Ns
	extra := make([]dns.RR, 0, len(resp.Extra)+len(m.Extra))
	for _, rr := range resp.Extra {
		if t := rr.Header().Rrtype; t != dns.TypeOPT && t != dns.TypeTSIG {
			extra = append(extra, rr)
		}
	}
	m.Extra = append(extra, m.Extra...) // our own OPT, if any, last
	return m, nil
}

// check returns the rcode and an error wrapping ErrMalformed when req is
// not a query this boundary answers.
func check(req *dns.Msg) (int, error) {
	switch {
	case req == nil:
		return dns.RcodeFormatError, fmt.Errorf("%w: no message", ErrMalformed)
	case req.Response:
		return dns.RcodeFormatError, fmt.Errorf("%w: message is a response", ErrMalformed)
	case req.Opcode != dns.OpcodeQuery:
		return dns.RcodeNotImplemented, fmt.Errorf("%w: opcode %s", ErrMalformed, opcodeName(req.Opcode))
	case len(req.Question) != 1:
		return dns.RcodeFormatError, fmt.Errorf("%w: %d questions", ErrMalformed, len(req.Question))
	case req.Question[0].Qclass != dns.ClassINET:
		return dns.RcodeFormatError, fmt.Errorf("%w: class %s", ErrMalformed, dns.Class(req.Question[0].Qclass))
	}
	if opt := req.IsEdns0(); opt != nil && opt.Version() != 0 {
		return dns.RcodeBadVers, fmt.Errorf("%w: EDNS version %d", ErrMalformed, opt.Version())
	}
	return dns.RcodeSuccess, nil
}

func opcodeName(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return fmt.Sprintf("OPCODE%d", op)
}

// Normalize returns name in the form policies are matched against:
// lowercase ASCII, no trailing dot. ok is false for the root name and for
// names that need escapes in presentation form (a dot or other special
// byte inside a label): no policy host can list those.
func Normalize(name string) (norm string, ok bool) {
	name = strings.TrimSuffix(name, ".")
	b := []byte(name)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	norm = string(b)
	return norm, norm != "" && !strings.ContainsRune(norm, '\\')
}

// Refused returns a REFUSED reply to req.
func Refused(req *dns.Msg) *dns.Msg { return reply(req, dns.RcodeRefused) }

// ServFail returns a SERVFAIL reply to req (for a query actor that failed).
func ServFail(req *dns.Msg) *dns.Msg { return reply(req, dns.RcodeServerFailure) }

// FormErr returns a FORMERR reply to req.
func FormErr(req *dns.Msg) *dns.Msg { return reply(req, dns.RcodeFormatError) }

// reply returns an empty reply to req with rcode: req's Id, opcode, first
// question, RD and CD bits, RA set, and an OPT record when req had one.
// A nil req gets a reply with Id 0.
func reply(req *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.Response = true
	m.RecursionAvailable = true
	m.Rcode = rcode
	if req == nil {
		return m
	}
	m.SetRcode(req, rcode)
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ednsUDPSize, opt.Do())
	}
	return m
}

// fit makes resp fit the client's limit for tr: 512 bytes over UDP without
// EDNS, the client's advertised size with it (at least 512), 64 KiB over
// TCP. Records that do not fit are dropped and TC is set.
func fit(resp, req *dns.Msg, tr Transport) {
	size := dns.MinMsgSize
	switch {
	case tr == TCP:
		size = dns.MaxMsgSize
	case req != nil:
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
	}
	resp.Truncate(size)
	resp.Compress = true
}

// AcceptFunc is a dns.Server MsgAcceptFunc that lets every query through
// to the handler, so that Answer classifies malformed ones (FORMERR,
// NOTIMP) and each gets an Outcome and an audit event. Responses are
// ignored (never answered), as dns.DefaultMsgAcceptFunc does.
func AcceptFunc(dh dns.Header) dns.MsgAcceptAction {
	if dh.Bits&(1<<15) != 0 { // QR
		return dns.MsgIgnore
	}
	return dns.MsgAccept
}

// MalformedPacket returns a FORMERR reply to a raw packet that failed to
// unpack, or nil when none must be sent: fewer than 12 bytes (no header to
// take an Id from) or the QR bit set (never answer a response).
func MalformedPacket(p []byte) *dns.Msg {
	if len(p) < 12 {
		return nil
	}
	flags := uint16(p[2])<<8 | uint16(p[3])
	if flags&(1<<15) != 0 {
		return nil
	}
	m := reply(nil, dns.RcodeFormatError)
	m.Id = uint16(p[0])<<8 | uint16(p[1])
	m.Opcode = int(flags>>11) & 0xF
	m.RecursionDesired = flags&(1<<8) != 0
	return m
}
