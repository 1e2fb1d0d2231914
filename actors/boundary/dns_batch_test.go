package boundary

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/logx"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// These tests hand the dns actor batches built by hand (dnsBatch, as one
// recvmmsg would deliver them), so that which queries share a batch is
// certain; the replies come back over a real UDP socket.

// nameDecider allows the names it lists and refuses the others.
type nameDecider map[string]bool

func (d nameDecider) DecideConnect(context.Context, ConnectQuery) ConnectVerdict {
	return ConnectVerdict{Reason: reason.EndpointNotAllowed}
}

func (d nameDecider) DecideDNS(_ context.Context, name string, _ uint16) dnsproxy.Verdict {
	if d[name] {
		return dnsproxy.Verdict{Allow: true, Policy: "batch-test", Version: 1}
	}
	return dnsproxy.Verdict{}
}

// events is an audit sink that keeps events and can be told to panic on
// the event of one name.
type events struct {
	mu      sync.Mutex
	all     []audit.Event
	panicOn string
}

func (s *events) Record(e audit.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Query != nil && e.Query.Hostname == s.panicOn && s.panicOn != "" {
		s.panicOn = ""
		panic("audit sink exploded")
	}
	s.all = append(s.all, e)
}

func (s *events) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}

func (s *events) byName() map[string]audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]audit.Event{}
	for _, e := range s.all {
		if e.Query != nil {
			m[e.Query.Hostname] = e
		}
	}
	return m
}

type batchEnv struct {
	b      *Boundary
	sys    *actor.ActorSystem
	faults *fault.Set
	audit  *events
	client *net.UDPConn // where replies go
	dnsPID *actor.PID
	logs   *testenv.Buffer // the boundary's log lines (warn and above)
}

func startBatchEnv(t *testing.T, up dnsproxy.Upstream, maxConns int) *batchEnv {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if up == nil {
		h, err := dnsproxy.ParseHosts(strings.NewReader("127.0.0.7 ok.test ok2.test\n"), "test")
		if err != nil {
			t.Fatal(err)
		}
		up = h
	}
	e := &batchEnv{faults: fault.NewSet(), audit: &events{}, client: client, logs: &testenv.Buffer{}}
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), e.logs)).Level(zerolog.WarnLevel)
	e.sys = actor.NewActorSystem(logx.ActorSystemOption(log))
	e.b, err = Start(e.sys, Config{DNSPacket: pc, Decider: nameDecider{"ok.test": true, "ok2.test": true, "slow.test": true},
		DNSUpstream: up, Audit: e.audit, Injector: e.faults, Log: log, Counters: supervise.NewCounters(), MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.b.Stop(); err != nil {
			t.Errorf("stop boundary: %v", err)
		}
		e.sys.Shutdown()
		_ = pc.Close()
		_ = client.Close()
	})
	e.dnsPID = e.sys.NewLocalPID("boundary/dns")
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, ok := e.sys.ProcessRegistry.Get(e.dnsPID)
		return ok
	}, "dns actor not started")
	return e
}

func queryPacket(t *testing.T, id uint16, name string) []byte {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, dns.TypeA)
	m.Id = id
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// send hands pkts to the dns actor as one batch from the client.
func (e *batchEnv) send(pkts ...[]byte) {
	b := &dnsBatch{}
	for _, p := range pkts {
		b.add(p, udpAddrPort(e.client.LocalAddr()), false)
	}
	e.sys.Root.Send(e.dnsPID, b)
}

// replies reads n replies (by Id), failing after within.
func (e *batchEnv) replies(t *testing.T, n int, within time.Duration) map[uint16]*dns.Msg {
	t.Helper()
	got := map[uint16]*dns.Msg{}
	buf := make([]byte, 65535)
	_ = e.client.SetReadDeadline(time.Now().Add(within))
	for len(got) < n {
		k, err := e.client.Read(buf)
		if err != nil {
			t.Fatalf("%d of %d replies: %v", len(got), n, err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:k]); err != nil {
			t.Fatalf("reply does not unpack: %v", err)
		}
		if _, dup := got[m.Id]; dup {
			t.Fatalf("two replies with id %d", m.Id)
		}
		got[m.Id] = m
	}
	return got
}

// noMore checks that no other reply comes within d.
func (e *batchEnv) noMore(t *testing.T, d time.Duration) {
	t.Helper()
	buf := make([]byte, 512)
	_ = e.client.SetReadDeadline(time.Now().Add(d))
	if n, err := e.client.Read(buf); err == nil {
		t.Fatalf("unexpected reply of %d bytes", n)
	}
}

func (e *batchEnv) settled(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool { return e.b.inflight.Load() == 0 },
		"%d queries still in flight", e.b.inflight.Load())
	if r := e.b.Counters().Get("dns", actor.RestartDirective); r != 0 {
		t.Fatalf("dns actor restarted %d times", r)
	}
}

func rcode(m *dns.Msg) string { return dns.RcodeToString[m.Rcode] }

// TestDNSBatchContainsAPanic: a panic in one query of a batch (the fault
// seam at dns.query, then at dns.upstream) answers that query SERVFAIL,
// audited boundary_fault; every other query of the batch gets its own
// answer and audit event.
func TestDNSBatchContainsAPanic(t *testing.T) {
	for _, p := range []fault.Point{fault.DNSQuery, fault.DNSUpstream} {
		t.Run(string(p), func(t *testing.T) {
			e := startBatchEnv(t, nil, 0)
			// dns.upstream is reached by allowed names only: ok.test twice
			// before the one that panics (q4), dns.query by every query.
			skip := 2
			if p == fault.DNSUpstream {
				skip = 1
			}
			e.faults.Arm(p, fault.Rule{Kind: fault.KindPanic, Count: 1, Skip: skip})
			names := []string{"ok.test.", "no1.test.", "ok2.test.", "no2.test.", "ok.test.", "no3.test."}
			var pkts [][]byte
			for j, n := range names {
				pkts = append(pkts, queryPacket(t, uint16(100+j), n))
			}
			e.send(pkts...)
			got := e.replies(t, len(names), 5*time.Second)
			// Either way the query that panics is ok2.test: the third to
			// reach dns.query, the second to reach dns.upstream.
			const failed = uint16(102)
			for j, n := range names {
				id := uint16(100 + j)
				want := "REFUSED"
				switch {
				case id == failed:
					want = "SERVFAIL"
				case strings.HasPrefix(n, "ok"):
					want = "NOERROR"
				}
				if rcode(got[id]) != want {
					t.Errorf("%s (id %d): %s, want %s", n, id, rcode(got[id]), want)
				}
				if want == "NOERROR" && (len(got[id].Answer) != 1 || got[id].Answer[0].(*dns.A).A.String() != "127.0.0.7") {
					t.Errorf("%s: answer %v", n, got[id].Answer)
				}
			}
			ev := e.audit.byName()
			if f := ev["ok2.test"]; f.Reason != reason.BoundaryFault || f.Query.Rcode != "SERVFAIL" || f.Message != dnsFaultMessage {
				t.Errorf("audit of the failed query: %+v %+v", f, f.Query)
			}
			if n := e.audit.len(); n != len(names) {
				t.Errorf("%d audit events, want %d", n, len(names))
			}
			if ev["no2.test"].Reason != reason.PolicyDNSIneligible || !(ev["ok.test"].ActionID == audit.ActionAllowed) {
				t.Errorf("audit of the others: %+v / %+v", ev["no2.test"], ev["ok.test"])
			}
			e.settled(t)
			if f := e.b.Stats().Faults.Load(); f != 1 {
				t.Errorf("faults %d, want 1", f)
			}
			// The query's own recover contained the panic, and the batch
			// actor answered the rest itself (the fallback when a panic
			// escapes, a rescue by a new batch actor, would give the same
			// answers but not this report).
			testenv.Eventually(t, 5*time.Second, func() bool { return strings.Contains(e.logs.String(), "1 of 6 queries of this batch failed") },
				"no report of the contained panic in the log:\n%s", e.logs.String())
			// The batch actor is reported to its supervisor once it has
			// answered everything: one query.stop per failed batch.
			testenv.Eventually(t, 5*time.Second, func() bool { return e.b.Counters().Get("query", actor.StopDirective) == 1 },
				"query.stop %d, want 1", e.b.Counters().Get("query", actor.StopDirective))
		})
	}
}

// TestDNSBatchAuditPanicKeepsTheAnswer: when the audit sink panics on one
// query's event, that query still gets the answer already built (as when
// a per-query actor had replied before recording), and the others are
// answered and audited.
func TestDNSBatchAuditPanicKeepsTheAnswer(t *testing.T) {
	e := startBatchEnv(t, nil, 0)
	e.audit.panicOn = "ok2.test"
	e.send(queryPacket(t, 1, "ok.test."), queryPacket(t, 2, "ok2.test."), queryPacket(t, 3, "no.test."))
	got := e.replies(t, 3, 5*time.Second)
	if rcode(got[1]) != "NOERROR" || rcode(got[2]) != "NOERROR" || rcode(got[3]) != "REFUSED" {
		t.Fatalf("rcodes %s %s %s", rcode(got[1]), rcode(got[2]), rcode(got[3]))
	}
	ev := e.audit.byName()
	if _, ok := ev["ok.test"]; !ok || len(ev) != 2 {
		t.Fatalf("audit events %v", ev)
	}
	e.settled(t)
}

// TestDNSBatchMalformedAmongValid: malformed packets in a batch are
// answered (FORMERR when they have a query's header) or dropped (shorter
// than a header, or a response), counted, and do not disturb the queries
// around them; an unusual but valid query takes the miekg/dns path.
func TestDNSBatchMalformedAmongValid(t *testing.T) {
	e := startBatchEnv(t, nil, 0)
	headerJunk := []byte{0, 11, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'b', 'r', 'o'}
	response := []byte{0, 12, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0, 1, 2, 3}
	escaped := new(dns.Msg).SetQuestion(`we\.ird.test.`, dns.TypeA)
	escaped.Id = 13
	escapedPkt, err := escaped.Pack()
	if err != nil {
		t.Fatal(err)
	}
	b := &dnsBatch{}
	from := udpAddrPort(e.client.LocalAddr())
	b.add(queryPacket(t, 10, "ok.test."), from, false)
	b.add([]byte{1, 2, 3}, from, false)                     // no header: dropped
	b.add(headerJunk, from, false)                          // FORMERR, id 11
	b.add(response, from, false)                            // never answered
	b.add(escapedPkt, from, false)                          // miekg path: REFUSED
	b.add(queryPacket(t, 14, "ok2.test.")[:20], from, true) // cut by the kernel: FORMERR
	b.add(queryPacket(t, 15, "no.test."), from, false)
	e.sys.Root.Send(e.dnsPID, b)
	got := e.replies(t, 5, 5*time.Second)
	want := map[uint16]string{10: "NOERROR", 11: "FORMERR", 13: "REFUSED", 14: "FORMERR", 15: "REFUSED"}
	for id, rc := range want {
		if m := got[id]; m == nil || rcode(m) != rc {
			t.Errorf("id %d: %v, want %s", id, m, rc)
		}
	}
	e.noMore(t, 200*time.Millisecond)
	if m := e.b.Stats().Malformed.Load(); m != 4 {
		t.Errorf("malformed %d, want 4", m)
	}
	if n := len(e.audit.byName()); n != 3 {
		t.Errorf("%d audited names, want 3 (ok.test, we\\.ird.test, no.test)", n)
	}
	e.settled(t)
}

// TestDNSBatchRescue: a query that blocks (a 2 s delay at dns.query) holds
// the rest of its batch back for dnsRescueAfter, not for its own delay.
func TestDNSBatchRescue(t *testing.T) {
	e := startBatchEnv(t, nil, 0)
	e.faults.Arm(fault.DNSQuery, fault.Rule{Kind: fault.KindDelay, Delay: 2 * time.Second, Count: 1})
	start := time.Now()
	e.send(queryPacket(t, 1, "ok.test."), queryPacket(t, 2, "ok2.test."), queryPacket(t, 3, "no.test."), queryPacket(t, 4, "ok.test."))
	got := e.replies(t, 3, time.Second)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the other queries took %v", took)
	}
	if got[1] != nil || rcode(got[2]) != "NOERROR" || rcode(got[3]) != "REFUSED" || rcode(got[4]) != "NOERROR" {
		t.Fatalf("replies before the slow one: %v", got)
	}
	slow := e.replies(t, 1, 5*time.Second)
	if rcode(slow[1]) != "NOERROR" {
		t.Fatalf("the slow query: %v", slow)
	}
	if n := e.audit.len(); n != 4 {
		t.Fatalf("%d audit events, want 4", n)
	}
	e.settled(t)
}

// slowUpstream is a remote upstream (not a LocalUpstream) that answers
// after a delay.
type slowUpstream struct{ delay time.Duration }

func (u slowUpstream) Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	select {
	case <-time.After(u.delay):
	case <-ctx.Done():
		return nil, fmt.Errorf("slow upstream: %w", ctx.Err())
	}
	m := new(dns.Msg).SetReply(req)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
		A: net.IPv4(192, 0, 2, 1)}}
	return m, nil
}

func (slowUpstream) String() string { return "slow" }

// TestDNSBatchHandsOffRemoteLookups: with an upstream that is not local,
// allowed names are answered by actors of their own, so the refused names
// of the batch do not wait for the exchange; unusual queries too.
func TestDNSBatchHandsOffRemoteLookups(t *testing.T) {
	e := startBatchEnv(t, slowUpstream{delay: 700 * time.Millisecond}, 0)
	escaped := new(dns.Msg).SetQuestion(`sl\.ow.test.`, dns.TypeA)
	escaped.Id = 5
	escapedPkt, _ := escaped.Pack()
	start := time.Now()
	e.send(queryPacket(t, 1, "slow.test."), queryPacket(t, 2, "no.test."), queryPacket(t, 3, "ok.test."), queryPacket(t, 4, "no2.test."), escapedPkt)
	fast := e.replies(t, 3, 500*time.Millisecond)
	if rcode(fast[2]) != "REFUSED" || rcode(fast[4]) != "REFUSED" || rcode(fast[5]) != "REFUSED" || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("refused names: %v after %v", fast, time.Since(start))
	}
	slow := e.replies(t, 2, 5*time.Second)
	for _, id := range []uint16{1, 3} {
		if m := slow[id]; m == nil || rcode(m) != "NOERROR" || len(m.Answer) != 1 {
			t.Fatalf("id %d: %v", id, m)
		}
	}
	if ev := e.audit.byName()["slow.test"]; ev.ActionID != audit.ActionAllowed || ev.Policy.Name != "batch-test" || ev.Query.Rcode != "NOERROR" {
		t.Fatalf("audit of a handed-off query: %+v", ev)
	}
	e.settled(t)
	if s := e.b.Counters().Get("query", actor.StopDirective); s != 0 {
		t.Fatalf("query.stop %d", s)
	}
}

// TestDNSBatchOverLimit: queries of a batch past MaxConns in flight are
// answered REFUSED (connection_limit, audited); the others are answered.
func TestDNSBatchOverLimit(t *testing.T) {
	e := startBatchEnv(t, nil, 2)
	e.send(queryPacket(t, 1, "ok.test."), queryPacket(t, 2, "ok.test."), queryPacket(t, 3, "ok.test."), queryPacket(t, 4, "ok.test."))
	got := e.replies(t, 4, 5*time.Second)
	if rcode(got[1]) != "NOERROR" || rcode(got[2]) != "NOERROR" || rcode(got[3]) != "REFUSED" || rcode(got[4]) != "REFUSED" {
		t.Fatalf("rcodes %v", got)
	}
	e.audit.mu.Lock()
	limited := 0
	for _, ev := range e.audit.all {
		if ev.Reason == reason.ConnectionLimit {
			limited++
		}
	}
	e.audit.mu.Unlock()
	if limited != 2 {
		t.Fatalf("%d connection_limit events, want 2", limited)
	}
	e.settled(t)
}

// TestDNSBatchReadsAndWritesForReal: queries sent back to back from many
// sockets are read in batches (recvmmsg) and all answered (sendmmsg),
// each audited once.
func TestDNSBatchReadsAndWritesForReal(t *testing.T) {
	e := startBatchEnv(t, nil, 0)
	if newBatchConn(e.b.cfg.DNSPacket) == nil {
		t.Fatal("an IPv4 UDP socket gets no batch reads")
	}
	const clients, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("udp4", e.b.cfg.DNSPacket.LocalAddr().String())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			// Bursts of 10 per client: 80 queries at most in the socket's
			// buffer, which the kernel would overflow (dropping queries) if
			// all 400 were sent at once.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 512)
			seen := map[uint16]bool{}
			for burst := 0; burst < each; burst += 10 {
				for i := burst; i < burst+10; i++ {
					name := "ok.test."
					if i%2 == 1 {
						name = fmt.Sprintf("no%d.test.", i)
					}
					m := new(dns.Msg).SetQuestion(name, dns.TypeA)
					m.Id = uint16(c*each + i)
					b, _ := m.Pack()
					if _, err := conn.Write(b); err != nil {
						errs <- err
						return
					}
				}
				for len(seen) < burst+10 {
					n, err := conn.Read(buf)
					if err != nil {
						errs <- fmt.Errorf("client %d: %d of %d replies: %w", c, len(seen), each, err)
						return
					}
					r := new(dns.Msg)
					if err := r.Unpack(buf[:n]); err != nil {
						errs <- err
						return
					}
					want := dns.RcodeSuccess
					if (int(r.Id)-c*each)%2 == 1 {
						want = dns.RcodeRefused
					}
					if r.Rcode != want || seen[r.Id] {
						errs <- fmt.Errorf("client %d: id %d rcode %s (dup %v)", c, r.Id, rcode(r), seen[r.Id])
						return
					}
					seen[r.Id] = true
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	e.settled(t)
	if q, n := e.b.Stats().Queries.Load(), e.audit.len(); q != clients*each || n != clients*each {
		t.Fatalf("%d queries counted, %d audited, want %d", q, n, clients*each)
	}
	// Each kept event still says its own query and client: the events of a
	// batch point into one array of its own, which no later batch reuses.
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	seen := map[string]bool{}
	for _, ev := range e.audit.all {
		q, src := ev.Query, ev.Src
		if q == nil || src == nil {
			t.Fatalf("event without query or source: %+v", ev)
		}
		allowed := q.Hostname == "ok.test"
		if want := map[bool]string{true: "NOERROR", false: "REFUSED"}[allowed]; q.Rcode != want || (ev.ActionID == audit.ActionAllowed) != allowed {
			t.Fatalf("event %s %s action %s: the query's parts were overwritten", q.Hostname, q.Rcode, ev.ActionName)
		}
		if key := fmt.Sprintf("%d %s", src.Port, q.Hostname); !allowed && seen[key] {
			t.Fatalf("two events of client port %d for %s", src.Port, q.Hostname)
		} else {
			seen[key] = true
		}
	}
}

// TestNewBatchConn: batch I/O for IPv4 UDP sockets only.
func TestNewBatchConn(t *testing.T) {
	v4, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer v4.Close()
	if newBatchConn(v4) == nil {
		t.Error("udp4: no batch conn")
	}
	if v6, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
		defer v6.Close()
		if newBatchConn(v6) != nil {
			t.Error("udp6: batch conn (IPv4-mapped clients could not be answered)")
		}
	}
	if newBatchConn(nil) != nil {
		t.Error("nil: batch conn")
	}
}

// TestDNSDualStackSocket: a dual-stack socket has no batch I/O (an
// IPv4-mapped client could not be answered with sendmmsg); its IPv4 and
// IPv6 clients are answered one datagram at a time and audited with their
// plain address.
func TestDNSDualStackSocket(t *testing.T) {
	pc, err := net.ListenPacket("udp", "[::]:0")
	if err != nil {
		testenv.Unavailable(t, "no dual-stack UDP socket: %v", err)
	}
	defer pc.Close()
	if newBatchConn(pc) != nil {
		t.Fatal("dual-stack socket got batch I/O")
	}
	h, err := dnsproxy.ParseHosts(strings.NewReader("127.0.0.7 ok.test\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	sink := &events{}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	sys := actor.NewActorSystem(logx.ActorSystemOption(log))
	defer sys.Shutdown()
	b, err := Start(sys, Config{DNSPacket: pc, Decider: nameDecider{"ok.test": true}, DNSUpstream: h, Audit: sink, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop() }()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	for _, server := range []string{"127.0.0.1", "::1"} {
		c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
		r, _, err := c.Exchange(new(dns.Msg).SetQuestion("ok.test.", dns.TypeA), net.JoinHostPort(server, fmt.Sprint(port)))
		if err != nil {
			if server == "::1" {
				t.Logf("no IPv6 loopback: %v", err)
				continue
			}
			t.Fatalf("query to %s: %v", server, err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("query to %s: %v", server, r)
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.all) == 0 || sink.all[0].Src == nil || sink.all[0].Src.IP != "127.0.0.1" {
		t.Fatalf("audit source of the IPv4 client: %+v", sink.all)
	}
}

// TestDNSBatchActorsAreReused: batch after batch is answered by the batch
// actor that answered the one before (no spawn and stop per batch); a
// batch with a contained panic stops its actor, and the next batch gets a
// new one, answered as well.
func TestDNSBatchActorsAreReused(t *testing.T) {
	e := startBatchEnv(t, nil, 0)
	const n = 50
	for i := range n {
		id := uint16(2 * i)
		e.send(queryPacket(t, id, "ok.test."), queryPacket(t, id+1, "no.test."))
		got := e.replies(t, 2, 5*time.Second)
		if rcode(got[id]) != "NOERROR" || rcode(got[id+1]) != "REFUSED" {
			t.Fatalf("batch %d: %s %s, want NOERROR REFUSED", i, rcode(got[id]), rcode(got[id+1]))
		}
		e.settled(t)
	}
	st := e.b.Stats()
	// Each batch is sent after the last one's replies came: the actor that
	// sent them has pushed itself back by then or is about to, so few are
	// spawned, not one per batch.
	if q := st.QueryActors.Load(); q > 3 {
		t.Fatalf("%d batches answered by %d spawned query actors, want at most 3", n, q)
	}
	before := st.QueryActors.Load()
	e.faults.Arm(fault.DNSQuery, fault.Rule{Kind: fault.KindPanic, Count: 1})
	e.send(queryPacket(t, 1000, "ok.test."), queryPacket(t, 1001, "ok2.test."))
	got := e.replies(t, 2, 5*time.Second)
	if rcode(got[1000]) != "SERVFAIL" || rcode(got[1001]) != "NOERROR" {
		t.Fatalf("batch with a panic: %s %s, want SERVFAIL NOERROR", rcode(got[1000]), rcode(got[1001]))
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return e.b.Counters().Get("query", actor.StopDirective) == 1 },
		"query.stop %d, want 1", e.b.Counters().Get("query", actor.StopDirective))
	e.send(queryPacket(t, 2000, "ok.test."))
	if got := e.replies(t, 1, 5*time.Second); rcode(got[2000]) != "NOERROR" {
		t.Fatalf("after the failed actor: %s, want NOERROR", rcode(got[2000]))
	}
	e.settled(t)
	if q := st.QueryActors.Load(); q != before+1 && q != before {
		t.Fatalf("query actors spawned %d -> %d: want the failed one replaced at most once", before, q)
	}
}
