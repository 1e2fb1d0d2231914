package dnsproxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

// The fast path: the common query (one question of class IN, at most a plain
// OPT record) is read straight from its packet and its reply is written
// straight into a byte slice, without miekg/dns messages. Anything else
// (other opcodes, compression pointers, names needing escapes, unknown EDNS
// options, trailing bytes, TCP) takes the miekg/dns path, Answer. For the
// queries it accepts, the fast path gives the same reply bytes and the same
// Outcome as Answer (TestAnswerPacketMatchesAnswer checks this).

// Header bits of a DNS message.
const (
	bitQR = 1 << 15
	bitRD = 1 << 8
	bitRA = 1 << 7
	bitCD = 1 << 4

	headerLen = 12
	// optLen is the wire size of an OPT record without options.
	optLen = 11
	// maxNameWire is the longest name in wire form (RFC 1035 2.3.4).
	maxNameWire = 255
)

// Query is a query as ParseQuery reads it from its packet.
type Query struct {
	ID     uint16
	RD, CD bool
	// Name is the question's name, normalised as Normalize does (lower
	// case, no trailing dot).
	Name  string
	QType uint16
	// EDNS says the query carried an OPT record (version 0); UDPSize and DO
	// are its advertised payload size and DNSSEC OK bit.
	EDNS    bool
	UDPSize uint16
	DO      bool
	// qend is the offset just past the question in the packet: pkt[12:qend]
	// is the question as sent, echoed in the reply.
	qend int
}

// ParseQuery reads pkt when it is a query of the common shape: QR clear,
// opcode QUERY, exactly one question of class IN whose name is made of
// letters, digits, '-' and '_' (no compression pointer, not the root), no
// answer or authority records, and at most one additional record, an OPT of
// version 0 with no options other than COOKIE and PADDING, and nothing after
// it. ok is false for every other packet, malformed or merely unusual: the
// caller then unpacks it with miekg/dns and calls Answer. A packet ParseQuery
// accepts always unpacks with miekg/dns (FuzzParseQuery checks this).
func ParseQuery(pkt []byte) (q Query, ok bool) {
	if len(pkt) < headerLen+2+4 {
		return q, false
	}
	flags := binary.BigEndian.Uint16(pkt[2:])
	if flags&bitQR != 0 || (flags>>11)&0xF != dns.OpcodeQuery {
		return q, false
	}
	if binary.BigEndian.Uint16(pkt[4:]) != 1 || binary.BigEndian.Uint16(pkt[6:]) != 0 || binary.BigEndian.Uint16(pkt[8:]) != 0 {
		return q, false
	}
	arcount := binary.BigEndian.Uint16(pkt[10:])
	if arcount > 1 {
		return q, false
	}
	var name [maxNameWire]byte
	n, off := 0, headerLen
	for {
		if off >= len(pkt) {
			return q, false
		}
		l := int(pkt[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 || off+l > len(pkt) || off+l-headerLen >= maxNameWire {
			return q, false // a pointer or extended label, or too long
		}
		if n > 0 {
			name[n] = '.'
			n++
		}
		for _, c := range pkt[off : off+l] {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			default:
				return q, false
			}
			name[n] = c
			n++
		}
		off += l
	}
	if n == 0 || off+4 > len(pkt) {
		return q, false // the root (REFUSED by Answer), or no type and class
	}
	if binary.BigEndian.Uint16(pkt[off+2:]) != dns.ClassINET {
		return q, false
	}
	q.QType = binary.BigEndian.Uint16(pkt[off:])
	off += 4
	q.qend = off
	if arcount == 1 {
		if !parseOPT(pkt[off:], &q) {
			return q, false
		}
	} else if off != len(pkt) {
		return q, false
	}
	q.ID = binary.BigEndian.Uint16(pkt)
	q.RD, q.CD = flags&bitRD != 0, flags&bitCD != 0
	q.Name = string(name[:n])
	return q, true
}

// parseOPT reads an OPT record that must fill b exactly.
func parseOPT(b []byte, q *Query) bool {
	if len(b) < optLen || b[0] != 0 || binary.BigEndian.Uint16(b[1:]) != dns.TypeOPT || b[6] != 0 {
		return false // not an OPT with the root name, or EDNS version > 0 (BADVERS)
	}
	rdata := b[optLen:]
	if int(binary.BigEndian.Uint16(b[9:])) != len(rdata) {
		return false
	}
	for len(rdata) > 0 {
		if len(rdata) < 4 {
			return false
		}
		code, l := binary.BigEndian.Uint16(rdata), int(binary.BigEndian.Uint16(rdata[2:]))
		if code != dns.EDNS0COOKIE && code != dns.EDNS0PADDING || 4+l > len(rdata) {
			return false
		}
		rdata = rdata[4+l:]
	}
	q.EDNS = true
	q.UDPSize = binary.BigEndian.Uint16(b[3:])
	q.DO = binary.BigEndian.Uint16(b[7:])&0x8000 != 0
	return true
}

// sizeLimit is the largest reply the client takes over UDP: 512 bytes
// without EDNS, its advertised size (at least 512) with it.
func (q *Query) sizeLimit() int {
	if q.EDNS && int(q.UDPSize) > dns.MinMsgSize {
		return int(q.UDPSize)
	}
	return dns.MinMsgSize
}

// replyLen is the length of the reply appendReply writes for addrs.
func (q *Query) replyLen(addrs []netip.Addr) int {
	n := q.qend
	for _, a := range addrs {
		if q.wants(a) {
			n += 12 + len(a.AsSlice())
		}
	}
	if q.EDNS {
		n += optLen
	}
	return n
}

// wants says whether an address of a hosts entry answers the question, as
// Hosts.Exchange decides.
func (q *Query) wants(a netip.Addr) bool {
	return a.Is4() && (q.QType == dns.TypeA || q.QType == dns.TypeANY) ||
		a.Is6() && (q.QType == dns.TypeAAAA || q.QType == dns.TypeANY)
}

// appendReply appends to dst the reply to the query in pkt with rcode and
// the addresses that answer it (as records of HostsTTL), laid out as
// miekg/dns packs the reply Answer builds: Id, RD and CD of the query, QR
// and RA set, the question as sent, answers whose names point at it, and
// an OPT record of our own (ednsUDPSize, the client's DO bit) when the
// query had one.
func (q *Query) appendReply(dst, pkt []byte, rcode int, addrs []netip.Addr) []byte {
	flags := uint16(bitQR|bitRA) | uint16(rcode&0xF)
	if q.RD {
		flags |= bitRD
	}
	if q.CD {
		flags |= bitCD
	}
	var an uint16
	for _, a := range addrs {
		if q.wants(a) {
			an++
		}
	}
	var ar uint16
	if q.EDNS {
		ar = 1
	}
	dst = binary.BigEndian.AppendUint16(dst, q.ID)
	dst = binary.BigEndian.AppendUint16(dst, flags)
	dst = append(dst, 0, 1)
	dst = binary.BigEndian.AppendUint16(dst, an)
	dst = append(dst, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, ar)
	dst = append(dst, pkt[headerLen:q.qend]...)
	for _, a := range addrs {
		if !q.wants(a) {
			continue
		}
		t, ip := dns.TypeA, a.AsSlice()
		if a.Is6() {
			t = dns.TypeAAAA
		}
		dst = append(dst, 0xC0, headerLen) // the name: a pointer to the question's
		dst = binary.BigEndian.AppendUint16(dst, t)
		dst = binary.BigEndian.AppendUint16(dst, dns.ClassINET)
		dst = binary.BigEndian.AppendUint32(dst, HostsTTL)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(ip)))
		dst = append(dst, ip...)
	}
	if q.EDNS {
		var do uint16
		if q.DO {
			do = 0x8000
		}
		dst = append(dst, 0) // root
		dst = binary.BigEndian.AppendUint16(dst, dns.TypeOPT)
		dst = binary.BigEndian.AppendUint16(dst, ednsUDPSize)
		dst = append(dst, 0, 0) // extended rcode, version
		dst = binary.BigEndian.AppendUint16(dst, do)
		dst = append(dst, 0, 0) // no options
	}
	return dst
}

// AppendServFail appends a SERVFAIL reply to the query in pkt, as ServFail
// and Pack would write it.
func (q *Query) AppendServFail(dst, pkt []byte) []byte {
	return q.appendReply(dst, pkt, dns.RcodeServerFailure, nil)
}

// LocalUpstream is an Upstream that answers from memory without blocking,
// as Hosts does: AnswerPacket answers its names inline, without messages.
type LocalUpstream interface {
	Upstream
	// Lookup returns the addresses of a normalised name, in the order
	// Exchange answers them, and whether the name is known. Exchange must
	// answer an unknown name NXDOMAIN, and a known one NOERROR with those
	// of its addresses that match the question (A: IPv4, AAAA: IPv6, ANY:
	// both; possibly none) as records of HostsTTL.
	Lookup(name string) (addrs []netip.Addr, found bool)
}

// AnswerPacket answers, for UDP, a query that ParseQuery read from pkt, as
// Answer answers the same packet unpacked with miekg/dns: the injector at
// fault.DNSQuery first, the same decision, the injector at
// fault.DNSUpstream, and the same reply bytes and Outcome. The reply is
// appended to dst. A panic of the injector or the Decider propagates, as
// in Answer.
//
// When the name is allowed and Upstream is not a LocalUpstream, the query
// is left pending: nothing is appended, pending is true and out carries the
// decision. The caller finishes it with Forward, off its batch, since the
// exchange may block.
//
// ctx bounds the decision; unlike Answer, AnswerPacket does not apply the
// per-query timeout: the caller does (WithTimeout), once for a batch of
// queries read together.
func (a *Answerer) AnswerPacket(ctx context.Context, pkt []byte, q *Query, dst []byte) (reply []byte, out Outcome, pending bool) {
	out.Name, out.QType = q.Name, q.QType
	inj := a.injector()
	if err := inj.Inject(fault.DNSQuery); err != nil {
		out.Disposition, out.Reason, out.Err = DispositionFault, reason.BoundaryFault, fmt.Errorf("dns query: %w", err)
		out.Rcode = dns.RcodeServerFailure
		return q.appendReply(dst, pkt, out.Rcode, nil), out, false
	}
	if !a.decide(ctx, q.Name, q.QType, &out) {
		out.Rcode = dns.RcodeRefused
		return q.appendReply(dst, pkt, out.Rcode, nil), out, false
	}
	local, ok := a.Upstream.(LocalUpstream)
	if !ok {
		return dst, out, true
	}
	out.Upstream = local.String()
	if err := inj.Inject(fault.DNSUpstream); err != nil {
		out.Disposition, out.Reason, out.Err = DispositionUpstreamFailed, reason.UpstreamUnreachable,
			fmt.Errorf("dns upstream %s: %w", out.Upstream, err)
		out.Rcode = dns.RcodeServerFailure
		return q.appendReply(dst, pkt, out.Rcode, nil), out, false
	}
	addrs, found := local.Lookup(q.Name)
	out.Disposition, out.Rcode = DispositionAnswered, dns.RcodeSuccess
	if !found {
		addrs, out.Rcode = nil, dns.RcodeNameError
	}
	if q.replyLen(addrs) <= q.sizeLimit() {
		return q.appendReply(dst, pkt, out.Rcode, addrs), out, false
	}
	// Over the client's limit: let miekg/dns drop records and set TC.
	b, err := a.truncated(ctx, pkt, &out)
	if err != nil {
		out.Disposition, out.Reason, out.Err = DispositionFault, reason.BoundaryFault, err
		out.Rcode = dns.RcodeServerFailure
		return q.appendReply(dst, pkt, out.Rcode, nil), out, false
	}
	return append(dst, b...), out, false
}

// truncated builds, through miekg/dns, an answer from the local upstream
// that must be truncated to the client's limit.
func (a *Answerer) truncated(ctx context.Context, pkt []byte, out *Outcome) ([]byte, error) {
	req := new(dns.Msg)
	if err := req.Unpack(pkt); err != nil {
		return nil, fmt.Errorf("dns query: unpack a parsed query: %w", err)
	}
	resp, err := a.exchange(ctx, req, out)
	if err != nil {
		return nil, err
	}
	fit(resp, req, UDP)
	b, err := resp.Pack()
	if err != nil {
		return nil, fmt.Errorf("dns query: pack a truncated reply: %w", err)
	}
	out.Rcode = resp.Rcode
	return b, nil
}
