package boundary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/policy/reason"
)

// UDP queries are read and answered in batches: one read (recvmmsg) takes
// up to dnsBatchMax datagrams, one query actor answers them in turn, each
// under its own recover (a panic answers SERVFAIL to that query only and is
// audited boundary_fault, as a failed per-query actor was), and the replies
// leave in one write (sendmmsg). Queries that would block the batch go to
// an actor of their own: an allowed name whose upstream is not local (the
// exchange), and any query still waiting when a batch runs past
// dnsRescueAfter.

const (
	// dnsBatchMax is how many datagrams one read takes and one batch
	// actor answers.
	dnsBatchMax = 64
	// dnsMaxUDPQuery is the longest UDP query read whole. A longer datagram
	// is cut by the kernel and answered FORMERR, as a malformed one.
	dnsMaxUDPQuery = 4096
	// dnsRescueAfter is how long a batch actor may take: past it, the
	// queries it has not started go to a new batch actor and the replies
	// it has built are sent, so one slow query (a delay fault, a slow
	// decision) holds the others of its read back by that much at most.
	dnsRescueAfter = 50 * time.Millisecond
	// dnsFaultMessage is the audit message of a query the boundary failed.
	dnsFaultMessage = "the boundary failed while answering this query"
	// dnsIdleBatchActors is how many batch actors may wait for a batch.
	// One read loop makes the batches, but under load it reads ahead of
	// the actors answering: with 16, dnsperf's 100 queries in flight made
	// a new batch actor for two reads in five (and stopped as many); at
	// 128 a few hundred in a run. More than this stop when they finish.
	dnsIdleBatchActors = 128
)

// udpQuery is one datagram of a batch.
type udpQuery struct {
	pkt  []byte
	from netip.AddrPort // the client: where the reply goes, and for the audit event
	cut  bool           // longer than dnsMaxUDPQuery: only its start was read
}

// udpReply is a reply waiting to be sent.
type udpReply struct {
	b  []byte
	to netip.AddrPort
}

// writeTo sends one datagram to a client (the paths that answer one at a
// time): with no net.Addr to build when pc is a UDP socket.
func writeTo(pc net.PacketConn, b []byte, to netip.AddrPort) error {
	if uc, ok := pc.(*net.UDPConn); ok {
		_, err := uc.WriteToUDPAddrPort(b, to)
		return err
	}
	_, err := pc.WriteTo(b, net.UDPAddrFromAddrPort(to))
	return err
}

// dnsBatch is the datagrams of one read and, while a batch actor answers
// them, the replies not yet sent. next is claimed atomically: by the batch
// actor one query at a time, by its rescue all the rest at once.
type dnsBatch struct {
	qs    []udpQuery
	arena []byte // the packets' bytes

	next atomic.Int32
	out  []byte // the replies' bytes, appended by the batch actor only

	mu      sync.Mutex // guards pending, events and the write buffers
	pending []udpReply
	events  []audit.Event // recorded before the replies leave, in one batch
	mm      *mmsgBufs     // the batch write's system-call structures
}

func (b *dnsBatch) add(pkt []byte, from netip.AddrPort, cut bool) {
	start := len(b.arena)
	b.arena = append(b.arena, pkt...)
	b.qs = append(b.qs, udpQuery{pkt: b.arena[start:len(b.arena):len(b.arena)], from: from, cut: cut})
}

// dnsBatchPool recycles batches and their buffers. It belongs to one dns
// actor; a batch goes back only when nothing else can still refer to it.
type dnsBatchPool struct{ p sync.Pool }

func (p *dnsBatchPool) get() *dnsBatch {
	if b, ok := p.p.Get().(*dnsBatch); ok {
		return b
	}
	return &dnsBatch{arena: make([]byte, 0, dnsBatchMax*128), out: make([]byte, 0, dnsBatchMax*128)}
}

func (p *dnsBatchPool) put(b *dnsBatch) {
	clear(b.qs)
	clear(b.pending)
	b.qs, b.arena, b.out, b.pending = b.qs[:0], b.arena[:0], b.out[:0], b.pending[:0]
	clear(b.events)
	b.events = b.events[:0]
	b.next.Store(0)
	p.p.Put(b)
}

// readUDPBatches is the UDP read loop with recvmmsg: each read becomes one
// dnsBatch sent to the dns actor.
func (a *dnsActor) readUDPBatches(bc *mmsgConn, send func(any)) {
	var mm mmsgBufs
	bufs := make([][]byte, dnsBatchMax)
	buf := make([]byte, dnsBatchMax*dnsMaxUDPQuery)
	for i := range bufs {
		bufs[i] = buf[i*dnsMaxUDPQuery : (i+1)*dnsMaxUDPQuery]
	}
	for {
		n, err := bc.recv(&mm, bufs)
		if err != nil {
			if a.readFailed(err, send) {
				return
			}
			continue
		}
		b := a.batches.get()
		for i := range n {
			h := &mm.hdrs[i]
			b.add(bufs[i][:min(int(h.n), dnsMaxUDPQuery)], sockaddrAddrPort(&mm.names[i]), h.hdr.Flags&unix.MSG_TRUNC != 0)
		}
		send(b)
	}
}

// udpAddrPort is addrPort for a UDP client, without a round trip through
// text: IPv4 clients (of a dual-stack socket too) come out as IPv4.
func udpAddrPort(a net.Addr) netip.AddrPort {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return addrPort(a)
	}
	ip, ok := netip.AddrFromSlice(ua.IP)
	if !ok {
		return netip.AddrPort{}
	}
	if ip.Is4In6() {
		ip = ip.Unmap()
	} else if ua.Zone != "" {
		ip = ip.WithZone(ua.Zone)
	}
	return netip.AddrPortFrom(ip, uint16(ua.Port))
}

// dnsBatchActor answers the queries of one batch at a time (query/N). See
// the top of this file. When a batch is answered the actor forgets it and
// waits in its dns actor's idle stack for the next; a failure stops it
// (its supervisor's directive), and a stopped actor is never handed
// another batch.
type dnsBatchActor struct {
	b        *Boundary
	answerer *dnsproxy.Answerer
	local    bool // the upstream answers from memory (never blocks)
	pc       net.PacketConn
	bc       *mmsgConn // nil: write one datagram at a time
	send     func(any) // to the dns actor
	pool     *dnsBatchPool
	idle     *idleActors[dnsBatchActor]
	self     string
	// job is the batch handed to this actor and not yet taken up. It is
	// set before the batch is sent: protoactor drops the user messages of
	// an actor that stops, so a batch handed to an actor stopped before it
	// read it (its dns actor restarting) goes back to the dns actor from
	// its Stopping instead of being lost with its in-flight slots.
	job atomic.Pointer[dnsBatch]
	batchRun
}

// batchRun is everything a batch actor knows of the batch it answers; it
// is zeroed when the batch is answered, so nothing carries over.
type batchRun struct {
	batch    *dnsBatch
	timer    *time.Timer
	cur      *queryRun // the query being answered (points at run)
	run      queryRun
	released int // in-flight slots to free: queries this actor settled itself
	total    int // queries in the batch
	faults   int
	first    any // the first contained panic
	done     bool
	at       time.Time    // when the batch was taken up: its events' time
	parts    []eventParts // what its events point to; never grown in place
}

// queryRun is what a contained panic needs to answer its query.
type queryRun struct {
	q       *udpQuery
	start   int            // len(batch.out) when the query started
	parsed  bool           // ParseQuery read the packet into wq
	wq      dnsproxy.Query // the query, when parsed
	req     *dns.Msg       // set once unpacked by miekg/dns
	reply   []byte         // built, not yet queued
	settled bool
}

func (a *dnsBatchActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self().GetId()
	case *dnsBatch:
		if !a.job.CompareAndSwap(m, nil) {
			return // not (or no longer) this actor's
		}
		a.batchRun = batchRun{batch: m}
		a.answerAll()
		if a.faults > 0 {
			// Every query has its answer; the supervisor now stops this
			// actor and counts the failure (query.stop), as it did for a
			// failed per-query actor.
			panic(fmt.Errorf("%d of %d queries of this batch failed, the first with: %v", a.faults, a.total, a.first))
		}
		// The offer is the last thing done: from then on the dns actor may
		// hand this actor the next batch.
		a.batchRun = batchRun{}
		if !a.idle.push(idleActor[dnsBatchActor]{pid: ctx.Self(), a: a}) {
			ctx.Stop(ctx.Self())
		}
	case *actor.Stopping:
		a.abandon()
		if j := a.job.Swap(nil); j != nil {
			a.send(&dnsRescue{batch: j})
		}
	}
}

// answerAll answers the batch's queries, one at a time, until none is
// left to claim.
func (a *dnsBatchActor) answerAll() {
	qctx, cancel := a.answerer.WithTimeout(context.Background())
	defer cancel()
	bt := a.batch
	a.at = time.Now()
	// The timer's rescue may still run when this actor has moved on to
	// its next batch: it is given this one, not the actor's field.
	a.timer = time.AfterFunc(dnsRescueAfter, func() { a.rescue(bt) })
	a.total = len(bt.qs)
	for {
		i := int(bt.next.Add(1)) - 1
		if i >= len(bt.qs) {
			break
		}
		a.run = queryRun{q: &bt.qs[i], start: len(bt.out)}
		a.answer(qctx, &a.run)
	}
	a.finish()
}

// answer answers one query; a panic answers it SERVFAIL (fault).
func (a *dnsBatchActor) answer(ctx context.Context, r *queryRun) {
	a.cur = r
	defer func() {
		if p := recover(); p != nil {
			a.fault(r, p)
		}
	}()
	q, bt := r.q, a.batch
	if q.cut {
		a.malformed(r)
		return
	}
	if r.wq, r.parsed = dnsproxy.ParseQuery(q.pkt); r.parsed {
		out, o, pending := a.answerer.AnswerPacket(ctx, q.pkt, &r.wq, bt.out)
		if pending {
			held := o // only a handed-off outcome goes to the heap
			a.handoff(r, &held)
			return
		}
		bt.out = out
		r.reply = out[r.start:]
		a.record(q.from, o)
		a.queue(r)
		return
	}
	req := new(dns.Msg)
	if err := req.Unpack(q.pkt); err != nil {
		a.malformed(r)
		return
	}
	if !a.local {
		a.handoff(r, nil) // unusual, and the upstream may block: its own actor
		return
	}
	r.req = req
	resp, o := a.answerer.Answer(ctx, req, dnsproxy.UDP)
	b, err := resp.Pack()
	if err != nil {
		a.b.cfg.Log.Debug().Err(err).Msg("pack dns reply")
	} else {
		bt.out = append(bt.out, b...)
		r.reply = bt.out[r.start:]
	}
	if o.Disposition == dnsproxy.DispositionMalformed {
		a.b.stats.Malformed.Add(1)
	} else {
		a.record(q.from, o)
	}
	a.queue(r)
}

// malformed answers a datagram that is no query: FORMERR when it has a
// query's header, else nothing. Not audited (no decision), counted.
func (a *dnsBatchActor) malformed(r *queryRun) {
	a.b.stats.Malformed.Add(1)
	if m := dnsproxy.MalformedPacket(r.q.pkt); m != nil {
		if b, err := m.Pack(); err == nil {
			a.batch.out = append(a.batch.out, b...)
			r.reply = a.batch.out[r.start:]
		}
	}
	a.queue(r)
}

// queue settles a query: its reply (if any) waits for the batch's write.
func (a *dnsBatchActor) queue(r *queryRun) {
	if r.reply != nil {
		bt := a.batch
		bt.mu.Lock()
		bt.pending = append(bt.pending, udpReply{b: r.reply, to: r.q.from})
		bt.mu.Unlock()
	}
	r.settled = true
	a.released++
}

// handoff gives a query to an actor of its own (spawned by the dns actor),
// which answers it as queries were answered before batches: pending
// carries the decision when AnswerPacket already made it.
func (a *dnsBatchActor) handoff(r *queryRun, pending *dnsproxy.Outcome) {
	q := r.q
	pkt := bytes.Clone(q.pkt) // the batch's arena is recycled
	pc, to := a.pc, q.from
	a.send(&dnsHandoff{q: &dnsPacket{pkt: pkt, tr: dnsproxy.UDP, from: q.from, reply: func(b []byte) error {
		return writeTo(pc, b, to)
	}}, pending: pending})
	r.settled = true // its in-flight slot goes with it
}

// fault answers a query whose handling panicked: SERVFAIL, audited as
// boundary_fault, unless its reply was already built (the panic came
// after, e.g. from the audit sink): then that reply goes out.
func (a *dnsBatchActor) fault(r *queryRun, p any) {
	a.faults++
	if a.first == nil {
		a.first = p
	}
	a.b.cfg.Log.Error().Str("actor", a.self).Str("panic", fmt.Sprint(p)).
		Str("stack", string(debug.Stack())).Msg("dns query panicked")
	if r.settled {
		return
	}
	if r.reply != nil {
		a.queue(r)
		return
	}
	bt := a.batch
	bt.out = bt.out[:r.start] // drop a reply half written
	out := dnsproxy.Outcome{Rcode: dns.RcodeServerFailure, Disposition: dnsproxy.DispositionFault,
		Reason: reason.BoundaryFault, Message: dnsFaultMessage}
	switch {
	case r.parsed:
		out.Name, out.QType = r.wq.Name, r.wq.QType
		bt.out = r.wq.AppendServFail(bt.out, r.q.pkt)
		r.reply = bt.out[r.start:]
	case r.req != nil:
		out.Name, _ = dnsproxy.Normalize(questionName(r.req))
		out.QType = questionType(r.req)
		if b, err := dnsproxy.ServFail(r.req).Pack(); err == nil {
			bt.out = append(bt.out, b...)
			r.reply = bt.out[r.start:]
		}
	default:
		// The packet was never read as a query: nothing to answer, as a
		// per-query actor that failed before unpacking answered nothing.
		a.queue(r)
		return
	}
	a.b.stats.Faults.Add(1)
	a.queue(r)
	a.record(r.q.from, out)
}

// record counts a query and keeps its audit event for the batch's one
// audit write, made before the replies leave (flush).
func (a *dnsBatchActor) record(from netip.AddrPort, out dnsproxy.Outcome) {
	e := a.b.queryEvent(from, out, a.at, a.part())
	bt := a.batch
	bt.mu.Lock()
	bt.events = append(bt.events, e)
	bt.mu.Unlock()
}

// part returns the next eventParts of the batch. A full array is replaced,
// not grown: the events recorded so far keep pointing into the old one.
func (a *dnsBatchActor) part() *eventParts {
	if len(a.parts) == cap(a.parts) {
		a.parts = make([]eventParts, 0, max(len(a.batch.qs)-len(a.parts), 1))
	}
	a.parts = a.parts[:len(a.parts)+1]
	return &a.parts[len(a.parts)-1]
}

// recordEvents hands the batch's events to the audit sinks: at once when
// the sink takes batches (a batch's denials share one write), else one by
// one. A sink that panics loses no other query's event: each event is then
// recorded on its own (after a failed batch some may be recorded twice;
// none is lost).
func (a *dnsBatchActor) recordEvents(events []audit.Event) {
	if bs, ok := a.b.cfg.Audit.(audit.BatchSink); ok && a.recordBatch(bs, events) {
		return
	}
	for i := range events {
		a.recordOne(&events[i])
	}
}

func (a *dnsBatchActor) recordBatch(bs audit.BatchSink, events []audit.Event) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			a.b.cfg.Log.Error().Str("actor", a.self).Str("panic", fmt.Sprint(p)).Msg("dns audit batch failed: recording one by one")
		}
	}()
	bs.RecordBatch(events)
	return true
}

func (a *dnsBatchActor) recordOne(e *audit.Event) {
	defer func() {
		if p := recover(); p != nil {
			a.b.cfg.Log.Error().Str("actor", a.self).Str("panic", fmt.Sprint(p)).Str("name", e.Query.Hostname).Msg("dns audit event failed")
		}
	}()
	a.b.cfg.Audit.Record(*e)
}

// rescue runs on a timer when the batch takes too long: the queries not yet
// started go to a new batch actor, and the replies built so far are sent.
func (a *dnsBatchActor) rescue(bt *dnsBatch) {
	n := len(bt.qs)
	if start := int(bt.next.Swap(int32(n))); start < n {
		rest := a.pool.get()
		rest.qs = append(rest.qs, bt.qs[start:]...)
		a.send(&dnsRescue{batch: rest})
		a.b.cfg.Log.Debug().Str("actor", a.self).Int("queries", n-start).Msg("dns batch slow: the rest goes to a new batch actor")
	}
	a.flush(bt)
}

// finish sends the replies and frees this actor's in-flight slots. The
// batch is recycled only when its rescue never ran: a rescued batch's
// packets are still read by the next batch actor.
func (a *dnsBatchActor) finish() {
	a.done = true
	rescued := !a.timer.Stop()
	a.flush(a.batch)
	a.b.inflight.Add(-int64(a.released))
	if !rescued {
		a.pool.put(a.batch)
	}
}

// abandon runs when this actor stops. After a normal run it has nothing to
// do; when a panic escaped a query's recover (it should not), the query
// being answered gets SERVFAIL, the queries not started go to a new batch
// actor and the replies built are sent.
func (a *dnsBatchActor) abandon() {
	if a.done || a.batch == nil {
		return
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	if r := a.cur; r != nil && !r.settled {
		func() {
			defer func() {
				if p := recover(); p != nil {
					a.b.cfg.Log.Error().Str("actor", a.self).Str("panic", fmt.Sprint(p)).Msg("dns query fault handling panicked")
				}
			}()
			a.fault(r, "the batch actor failed")
		}()
	}
	a.rescue(a.batch)
	a.done = true
	a.b.inflight.Add(-int64(a.released))
}

// flush writes the pending replies: sendmmsg when the socket allows it, one
// datagram at a time otherwise. A reply that cannot be sent is dropped
// (the client retries), as before batches.
func (a *dnsBatchActor) flush(bt *dnsBatch) {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if len(bt.events) > 0 {
		a.recordEvents(bt.events)
		clear(bt.events)
		bt.events = bt.events[:0]
	}
	if a.bc == nil {
		for _, r := range bt.pending {
			if err := writeTo(a.pc, r.b, r.to); err != nil {
				a.b.cfg.Log.Debug().Err(err).Msg("send dns reply")
			}
		}
		clear(bt.pending)
		bt.pending = bt.pending[:0]
		return
	}
	if len(bt.pending) == 0 {
		return
	}
	if bt.mm == nil {
		bt.mm = new(mmsgBufs) // kept with the batch in its pool
	}
	for i := 0; i < len(bt.pending); {
		n := min(len(bt.pending)-i, dnsBatchMax)
		for j := range n {
			r := &bt.pending[i+j]
			bt.mm.setOut(j, r.b, r.to)
		}
		sent, err := a.bc.send(bt.mm, n)
		if err != nil {
			a.b.cfg.Log.Debug().Err(err).Msg("send dns replies")
			if errors.Is(err, net.ErrClosed) {
				break
			}
			sent++ // skip the reply the kernel refused
		}
		i += sent
	}
	clear(bt.mm.iovs[:]) // no reply's bytes stay reachable
	clear(bt.pending)
	bt.pending = bt.pending[:0]
}
