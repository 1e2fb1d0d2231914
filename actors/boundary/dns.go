package boundary

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/policy/reason"
)

// Messages of the dns actor.
type (
	// dnsPacket is one query as received, with the way back to its client.
	dnsPacket struct {
		pkt   []byte
		tr    dnsproxy.Transport
		from  netip.AddrPort
		reply func([]byte) error
	}
	// dnsListenFailed ends the dns actor: its supervisor restarts it.
	dnsListenFailed struct{ err error }
)

// dnsActor owns the DNS read loops (UDP packets, TCP connections) and
// spawns a query actor per query.
type dnsActor struct {
	b        *Boundary
	answerer *dnsproxy.Answerer
	next     uint64
	udpDone  chan struct{}
	tcp      *acceptLoop
}

func (a *dnsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *dnsPacket:
		a.b.stats.Queries.Add(1)
		if int(a.b.inflight.Load()) >= a.b.cfg.MaxConns {
			a.b.refuseQuery(m)
			return
		}
		a.b.inflight.Add(1)
		a.next++
		q := &queryActor{b: a.b, answerer: a.answerer, q: m}
		if _, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return q }, actor.WithDispatcher(a.b.pool)),
			"query/"+strconv.FormatUint(a.next, 10)); err != nil {
			a.b.cfg.Log.Error().Err(err).Msg("spawn query actor")
		}
	case *dnsListenFailed:
		panic(fmt.Errorf("dns listener failed: %w", m.err))
	case *actor.Restarting:
		a.stopLoops()
	case *actor.Stopping:
		a.stopLoops()
		a.b.streams.closeAll()
	}
}

func (a *dnsActor) start(ctx actor.Context) {
	cfg := a.b.cfg
	send := sendTo(ctx.ActorSystem(), ctx.Self())
	if pc := cfg.DNSPacket; pc != nil {
		a.udpDone = make(chan struct{})
		go a.readUDP(pc, send)
	}
	if ln := cfg.DNSStream; ln != nil {
		a.tcp = startAcceptLoop(ln, func(c net.Conn) {
			if a.b.streams.len()+a.b.live.len() >= cfg.MaxConns {
				a.b.overLimit(c, nil)
				return
			}
			go a.readTCP(c, send)
		},
			func(err error) { send(&dnsListenFailed{err: err}) })
	}
}

func (a *dnsActor) readUDP(pc net.PacketConn, send func(any)) {
	defer close(a.udpDone)
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if isTimeout(err) {
				return // stopLoops interrupted us
			}
			if errors.Is(err, net.ErrClosed) {
				send(&dnsListenFailed{err: err})
				return
			}
			continue
		}
		pkt := make([]byte, n)
		copy(pkt, buf[:n])
		fromAP := addrPort(from)
		send(&dnsPacket{pkt: pkt, tr: dnsproxy.UDP, from: fromAP, reply: func(b []byte) error {
			_, err := pc.WriteTo(b, from)
			return err
		}})
	}
}

// readTCP serves one DNS-over-TCP connection: length-prefixed queries,
// answered in any order, closed after IdleTimeout without a query.
func (a *dnsActor) readTCP(c net.Conn, send func(any)) {
	a.b.streams.add(c)
	defer a.b.streams.remove(c)
	var wmu sync.Mutex
	reply := func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		out := make([]byte, 2+len(b))
		binary.BigEndian.PutUint16(out, uint16(len(b)))
		copy(out[2:], b)
		_, err := c.Write(out)
		return err
	}
	from := addrPort(c.RemoteAddr())
	var lenBuf [2]byte
	for {
		_ = c.SetReadDeadline(time.Now().Add(a.b.cfg.IdleTimeout))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint16(lenBuf[:])
		if n == 0 {
			a.b.stats.Malformed.Add(1)
			return
		}
		pkt := make([]byte, n)
		if _, err := io.ReadFull(c, pkt); err != nil {
			a.b.stats.Malformed.Add(1)
			return
		}
		send(&dnsPacket{pkt: pkt, tr: dnsproxy.TCP, from: from, reply: reply})
	}
}

func (a *dnsActor) stopLoops() {
	if a.udpDone != nil {
		pc := a.b.cfg.DNSPacket
		_ = pc.SetReadDeadline(time.Unix(1, 0))
		<-a.udpDone
		_ = pc.SetReadDeadline(time.Time{})
		a.udpDone = nil
	}
	if a.tcp != nil {
		a.tcp.stop()
		a.tcp = nil
	}
}

// connSet tracks open connections (proxy clients, DNS-over-TCP streams) so
// a stopping listener actor closes them.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *connSet) closeAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		_ = c.Close()
	}
}

// queryActor answers one DNS query.
type queryActor struct {
	b        *Boundary
	answerer *dnsproxy.Answerer
	q        *dnsPacket
	req      *dns.Msg
	replied  bool
}

func (a *queryActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		a.answer(ctx)
		ctx.Stop(ctx.Self()) // not deferred: after a panic the supervisor stops us
	case *actor.Stopping:
		a.b.inflight.Add(-1)
		if !a.replied && a.req != nil {
			// The query failed in this actor: SERVFAIL, audited.
			a.b.stats.Faults.Add(1)
			a.reply(dnsproxy.ServFail(a.req))
			name, _ := dnsproxy.Normalize(questionName(a.req))
			a.record(dnsproxy.Outcome{Name: name, QType: questionType(a.req), Rcode: dns.RcodeServerFailure,
				Reason: reason.BoundaryFault, Message: "the boundary failed while answering this query"})
		}
	}
}

func (a *queryActor) answer(ctx actor.Context) {
	req := new(dns.Msg)
	if err := req.Unpack(a.q.pkt); err != nil {
		a.b.stats.Malformed.Add(1)
		a.replied = true
		if r := dnsproxy.MalformedPacket(a.q.pkt); r != nil {
			a.reply(r)
		}
		return
	}
	a.req = req
	resp, out := a.answerer.Answer(context.Background(), req, a.q.tr)
	a.reply(resp)
	if out.Disposition == dnsproxy.DispositionMalformed {
		a.b.stats.Malformed.Add(1)
		return
	}
	a.record(out)
}

func (a *queryActor) reply(m *dns.Msg) {
	a.replied = true
	b, err := m.Pack()
	if err != nil {
		a.b.cfg.Log.Debug().Err(err).Msg("pack dns reply")
		return
	}
	if err := a.q.reply(b); err != nil {
		a.b.cfg.Log.Debug().Err(err).Msg("send dns reply")
	}
}

func (a *queryActor) record(out dnsproxy.Outcome) {
	allowed := out.Allowed
	if allowed {
		a.b.stats.Allowed.Add(1)
	} else {
		a.b.stats.Denied.Add(1)
	}
	e := audit.NewDecision(audit.ClassDNS, allowed, out.Reason)
	e.Sandbox = a.b.cfg.Sandbox
	e.Query = &audit.Query{Hostname: out.Name, Type: dns.TypeToString[out.QType], Rcode: dns.RcodeToString[out.Rcode]}
	if a.q.from.IsValid() {
		e.Src = &audit.Endpoint{IP: a.q.from.Addr().String(), Port: int(a.q.from.Port())}
	}
	e.Policy.Name, e.Policy.PolicyName, e.Policy.Version, e.Message = out.Policy, out.PolicyName, out.Version, out.Message
	if out.Err != nil && e.Message == "" {
		e.Message = out.Err.Error()
	}
	a.b.cfg.Audit.Record(e)
}

func questionName(m *dns.Msg) string {
	if len(m.Question) == 0 {
		return ""
	}
	return m.Question[0].Name
}

func questionType(m *dns.Msg) uint16 {
	if len(m.Question) == 0 {
		return 0
	}
	return m.Question[0].Qtype
}
