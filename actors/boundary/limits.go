package boundary

import (
	"io"
	"net"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/policy/reason"
)

// overLimitWrite bounds writing a refusal to a client over the limit: the
// listener actor does it inline and must not wait on a client.
const overLimitWrite = 100 * time.Millisecond

// overLimit refuses a connection over Config.MaxConns: it writes answer
// (the 503; nil: none, for a DNS stream), closes it, and audits the
// refusal (no identity lookup: a flood must cost as little as possible).
func (b *Boundary) overLimit(c net.Conn, answer func(io.Writer, int) error) {
	if answer != nil {
		_ = c.SetWriteDeadline(time.Now().Add(overLimitWrite))
		_ = answer(c, b.cfg.MaxConns)
	}
	src := addrPort(c.RemoteAddr())
	_ = c.Close()
	b.stats.Denied.Add(1)
	e := audit.NewDecision(audit.ClassNetwork, false, reason.ConnectionLimit)
	e.Sandbox = b.cfg.Sandbox
	if src.IsValid() {
		e.Src = &audit.Endpoint{IP: src.Addr().String(), Port: int(src.Port())}
	}
	e.Message = "over the sandbox's limit of concurrent mediated connections"
	b.cfg.Audit.Record(e)
}

// refuseQuery answers a query over the in-flight limit REFUSED, audited.
func (b *Boundary) refuseQuery(q *dnsPacket) {
	b.stats.Denied.Add(1)
	req := new(dns.Msg)
	e := audit.NewDecision(audit.ClassDNS, false, reason.ConnectionLimit)
	e.Sandbox = b.cfg.Sandbox
	e.Message = "over the sandbox's limit of DNS queries in flight"
	if q.from.IsValid() {
		e.Src = &audit.Endpoint{IP: q.from.Addr().String(), Port: int(q.from.Port())}
	}
	if err := req.Unpack(q.pkt); err == nil {
		name, _ := dnsproxy.Normalize(questionName(req))
		e.Query = &audit.Query{Hostname: name, Type: dns.TypeToString[questionType(req)], Rcode: dns.RcodeToString[dns.RcodeRefused]}
		if out, err := dnsproxy.Refused(req).Pack(); err == nil {
			_ = q.reply(out)
		}
	}
	b.cfg.Audit.Record(e)
}
