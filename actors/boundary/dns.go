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
	// dnsHandoff is a query a batch actor gives to an actor of its own;
	// pending is its decision when already made (dnsproxy.AnswerPacket).
	// Its in-flight slot is already taken.
	dnsHandoff struct {
		q       *dnsPacket
		pending *dnsproxy.Outcome
	}
	// dnsRescue is the rest of a batch that took too long; its in-flight
	// slots are already taken.
	dnsRescue struct{ batch *dnsBatch }
)

// dnsActor owns the DNS read loops (UDP packets, TCP connections) and
// the query actors: a batch actor answers each UDP read (a batch, see
// dns_batch.go), one that answered an earlier batch when one waits, and an
// actor of its own answers each TCP query and each query a batch hands
// off.
type dnsActor struct {
	b        *Boundary
	answerer *dnsproxy.Answerer
	udpDone  chan struct{}
	tcp      *acceptLoop
	batches  *dnsBatchPool
	idle     *idleActors[dnsBatchActor] // batch actors waiting for a batch
	bc       *mmsgConn                  // the UDP socket's batch reads and writes; nil: none
	local    bool                       // the upstream answers from memory: a batch never hands off for it
}

func (a *dnsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *dnsBatch:
		a.b.stats.Queries.Add(int64(len(m.qs)))
		a.admit(m)
		if len(m.qs) == 0 {
			a.batches.put(m)
			return
		}
		a.spawnBatch(ctx, m)
	case *dnsRescue:
		a.spawnBatch(ctx, m.batch)
	case *dnsPacket:
		a.b.stats.Queries.Add(1)
		if int(a.b.inflight.Load()) >= a.b.cfg.MaxConns {
			a.b.refuseQuery(m)
			return
		}
		a.b.inflight.Add(1)
		a.spawn(ctx, &queryActor{b: a.b, answerer: a.answerer, q: m})
	case *dnsHandoff:
		a.spawn(ctx, &queryActor{b: a.b, answerer: a.answerer, q: m.q, pending: m.pending})
	case *dnsListenFailed:
		panic(fmt.Errorf("dns listener failed: %w", m.err))
	case *actor.Restarting:
		a.stopLoops()
		a.closeIdle()
	case *actor.Stopping:
		a.stopLoops()
		a.closeIdle()
		a.b.streams.closeAll()
	}
}

// admit takes an in-flight slot for each query of a fresh batch; past
// MaxConns a query is answered REFUSED (connection_limit, audited) and
// leaves the batch.
func (a *dnsActor) admit(m *dnsBatch) {
	kept := m.qs[:0]
	for _, q := range m.qs {
		if int(a.b.inflight.Load()) >= a.b.cfg.MaxConns {
			pc, to := a.b.cfg.DNSPacket, q.from
			a.b.refuseQuery(&dnsPacket{pkt: q.pkt, tr: dnsproxy.UDP, from: q.from, reply: func(b []byte) error {
				return writeTo(pc, b, to)
			}})
			continue
		}
		a.b.inflight.Add(1)
		kept = append(kept, q)
	}
	clear(m.qs[len(kept):])
	m.qs = kept
}

// spawnBatch hands m to a batch actor waiting for one, or to a new one: a
// spawn and a stop per batch were most of the actor runtime's cost per
// batch (two mailbox runs of the batch actor's and one of this actor's).
func (a *dnsActor) spawnBatch(ctx actor.Context, m *dnsBatch) {
	if w, ok := a.idle.pop(); ok {
		w.a.job.Store(m)
		ctx.Send(w.pid, m)
		return
	}
	ba := &dnsBatchActor{b: a.b, answerer: a.answerer, local: a.local, pc: a.b.cfg.DNSPacket, bc: a.bc,
		send: sendTo(ctx.ActorSystem(), ctx.Self()), pool: a.batches, idle: a.idle}
	ba.job.Store(m)
	if pid := a.spawn(ctx, ba); pid != nil {
		ctx.Send(pid, m)
	}
}

// spawn starts a query actor (query/N) on the leaves' pool. A failed spawn
// frees nothing: it only happens when the actor system is shutting down.
func (a *dnsActor) spawn(ctx actor.Context, act actor.Actor) *actor.PID {
	// query/N: N counts the query actors spawned, across restarts (only
	// this actor spawns them), as conn/N does.
	pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return act }, actor.WithDispatcher(a.b.pool)),
		"query/"+strconv.FormatInt(a.b.stats.QueryActors.Load()+1, 10))
	if err != nil {
		a.b.cfg.Log.Error().Err(err).Msg("spawn query actor")
		return nil
	}
	a.b.stats.QueryActors.Add(1)
	return pid
}

func (a *dnsActor) start(ctx actor.Context) {
	cfg := a.b.cfg
	send := sendTo(ctx.ActorSystem(), ctx.Self())
	if a.batches == nil {
		a.batches = &dnsBatchPool{}
	}
	// A new stack for each incarnation: the last one's waiting actors
	// stopped with it.
	a.idle = newIdleActors[dnsBatchActor](dnsIdleBatchActors, nil)
	_, a.local = a.answerer.Upstream.(dnsproxy.LocalUpstream)
	if pc := cfg.DNSPacket; pc != nil {
		a.bc = newBatchConn(pc)
		a.udpDone = make(chan struct{})
		go a.readUDP(pc, send)
	}
	if ln := cfg.DNSStream; ln != nil {
		a.tcp = startAcceptLoop(ln, func(c net.Conn) bool {
			if a.b.OpenConns() >= cfg.MaxConns {
				a.b.overLimit(c, nil)
				return true
			}
			go a.readTCP(c, send)
			return true
		},
			func(err error) { send(&dnsListenFailed{err: err}) })
	}
}

// readUDP reads queries until stopLoops or a closed socket: in batches
// when the socket allows it, else one datagram (one batch) at a time.
func (a *dnsActor) readUDP(pc net.PacketConn, send func(any)) {
	defer close(a.udpDone)
	if a.bc != nil {
		a.readUDPBatches(a.bc, send)
		return
	}
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if a.readFailed(err, send) {
				return
			}
			continue
		}
		b := a.batches.get()
		b.add(buf[:n], udpAddrPort(from), false)
		send(b)
	}
}

// readFailed reports whether a UDP read error ends the read loop: a
// deadline (stopLoops interrupted it) or a closed socket (the dns actor is
// told, and fails). Other errors (ICMP errors of earlier replies) do not.
func (a *dnsActor) readFailed(err error, send func(any)) bool {
	if isTimeout(err) {
		return true
	}
	if errors.Is(err, net.ErrClosed) {
		send(&dnsListenFailed{err: err})
		return true
	}
	return false
}

// readTCP serves one DNS-over-TCP connection: length-prefixed queries,
// answered in any order, closed after IdleTimeout without a query.
func (a *dnsActor) readTCP(c net.Conn, send func(any)) {
	a.b.streams.add(c)
	defer func() {
		a.b.streams.remove(c)
		_ = c.Close()
	}()
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

// closeIdle forgets the batch actors waiting for a batch: they stop with
// this actor, and one that finishes later stops instead of waiting.
func (a *dnsActor) closeIdle() {
	if a.idle != nil {
		a.idle.close()
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

// queryActor answers one DNS query in an actor of its own: a TCP query, or
// a UDP query a batch handed off because answering it may block. It
// records the audit event before it sends the reply.
type queryActor struct {
	b        *Boundary
	answerer *dnsproxy.Answerer
	q        *dnsPacket
	// pending is the decision dnsproxy.AnswerPacket made for an allowed
	// name; the actor finishes the query with Forward.
	pending *dnsproxy.Outcome
	req     *dns.Msg
	resp    *dns.Msg // the reply, once built
	replied bool
}

func (a *queryActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		a.answer(ctx)
		ctx.Stop(ctx.Self()) // not deferred: after a panic the supervisor stops us
	case *actor.Stopping:
		a.b.inflight.Add(-1)
		switch {
		case a.replied:
		case a.resp != nil:
			// The failure came after the reply was built (recording it):
			// the client gets it.
			a.reply(a.resp)
		case a.req != nil:
			// The query failed in this actor: SERVFAIL, audited.
			a.b.stats.Faults.Add(1)
			a.reply(dnsproxy.ServFail(a.req))
			name, _ := dnsproxy.Normalize(questionName(a.req))
			a.b.recordQuery(a.q.from, dnsproxy.Outcome{Name: name, QType: questionType(a.req), Rcode: dns.RcodeServerFailure,
				Disposition: dnsproxy.DispositionFault, Reason: reason.BoundaryFault, Message: dnsFaultMessage})
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
	var out dnsproxy.Outcome
	if a.pending != nil {
		a.resp, out = a.answerer.Forward(context.Background(), req, a.q.tr, *a.pending)
	} else {
		a.resp, out = a.answerer.Answer(context.Background(), req, a.q.tr)
	}
	if out.Disposition == dnsproxy.DispositionMalformed {
		a.b.stats.Malformed.Add(1)
	} else {
		a.b.recordQuery(a.q.from, out)
	}
	a.reply(a.resp)
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

// recordQuery counts and audits one answered query (class 4003).
func (b *Boundary) recordQuery(from netip.AddrPort, out dnsproxy.Outcome) {
	b.cfg.Audit.Record(b.queryEvent(from, out, time.Now(), new(eventParts)))
}

// eventParts holds what a query's audit event points to. A batch actor
// takes them from one array per batch, not two allocations per query.
type eventParts struct {
	query audit.Query
	src   audit.Endpoint
}

// queryEvent counts one query answered at and returns its audit event,
// whose query and source are p's.
func (b *Boundary) queryEvent(from netip.AddrPort, out dnsproxy.Outcome, at time.Time, p *eventParts) audit.Event {
	allowed := out.Allowed
	if allowed {
		b.stats.Allowed.Add(1)
	} else {
		b.stats.Denied.Add(1)
	}
	e := audit.NewDecisionAt(at, audit.ClassDNS, allowed, out.Reason)
	e.Sandbox = b.cfg.Sandbox
	p.query = audit.Query{Hostname: out.Name, Type: dns.TypeToString[out.QType], Rcode: dns.RcodeToString[out.Rcode]}
	e.Query = &p.query
	if from.IsValid() {
		p.src = audit.Endpoint{IP: b.ipString(from.Addr()), Port: int(from.Port())}
		e.Src = &p.src
	}
	e.Policy.Name, e.Policy.PolicyName, e.Policy.Version, e.Message = out.Policy, out.PolicyName, out.Version, out.Message
	if out.Err != nil && e.Message == "" {
		e.Message = out.Err.Error()
	}
	return e
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
