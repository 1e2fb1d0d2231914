package dnsproxy

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// upstream is a real miekg/dns server on 127.0.0.1, UDP and TCP on the
// same port, that records the queries it gets.
type upstream struct {
	addr string
	ip   string // address it answers for ordinary names

	mu   sync.Mutex
	seen []seenQuery
}

type seenQuery struct {
	network string
	msg     *dns.Msg
}

// startUpstream starts an upstream answering:
//   - big.test.: over UDP an empty truncated reply, over TCP 3 A records;
//   - fail.test.: SERVFAIL;
//   - elsewhere.test.: an answer for another question;
//   - anything else: one A record with ip (or SERVFAIL when ip is "").
func startUpstream(t *testing.T, ip string) *upstream {
	t.Helper()
	u := &upstream{ip: ip}
	pc, ln := listenSamePort(t)
	u.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: ln, Handler: u}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		served := make(chan error, 1)
		go func() { served <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-served:
			t.Fatalf("upstream server: %v", err)
		case <-time.After(5 * time.Second):
			t.Fatal("upstream server did not start in 5s")
		}
		t.Cleanup(func() {
			if err := srv.Shutdown(); err != nil {
				t.Errorf("upstream shutdown: %v", err)
			}
			<-served
		})
	}
	return u
}

// listenSamePort opens UDP and TCP sockets on one 127.0.0.1 port (a few
// tries, in case another process takes the TCP port first).
func listenSamePort(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("no 127.0.0.1 port free for both UDP and TCP in 10 tries")
	return nil, nil
}

func (u *upstream) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	network := w.RemoteAddr().Network()
	u.mu.Lock()
	u.seen = append(u.seen, seenQuery{network, r.Copy()})
	u.mu.Unlock()

	m := new(dns.Msg).SetReply(r)
	q := r.Question[0]
	a := func(ip string) dns.RR {
		return &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(ip)}
	}
	switch strings.ToLower(q.Name) {
	case "big.test.":
		if network == "udp" {
			m.Truncated = true
		} else {
			m.Answer = []dns.RR{a("127.0.0.21"), a("127.0.0.22"), a("127.0.0.23")}
		}
	case "fail.test.":
		m.Rcode = dns.RcodeServerFailure
	case "elsewhere.test.":
		m.Question[0].Name = "other.test."
	default:
		if u.ip == "" {
			m.Rcode = dns.RcodeServerFailure
		} else {
			m.Answer = []dns.RR{a(u.ip)}
		}
	}
	w.WriteMsg(m) //nolint:errcheck // the client sees a missing reply
}

func (u *upstream) Seen() []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenQuery(nil), u.seen...)
}

func (u *upstream) networks() string {
	var ns []string
	for _, s := range u.Seen() {
		ns = append(ns, s.network)
	}
	return strings.Join(ns, ",")
}

func exchange(t *testing.T, f *Forwarder, name string) (*dns.Msg, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f.Exchange(ctx, query(name, dns.TypeA))
}

func firstA(m *dns.Msg) string {
	if m == nil || len(m.Answer) == 0 {
		return ""
	}
	if a, ok := m.Answer[0].(*dns.A); ok {
		return a.A.String()
	}
	return ""
}

func TestForwarderUDP(t *testing.T) {
	u := startUpstream(t, "127.0.0.9")
	resp, err := exchange(t, mustForwarder(t, []string{u.addr}), "www.test.")
	if err != nil || firstA(resp) != "127.0.0.9" {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if got := u.networks(); got != "udp" {
		t.Errorf("networks %q, want udp", got)
	}
}

func TestForwarderTCPFallback(t *testing.T) {
	u := startUpstream(t, "127.0.0.9")
	resp, err := exchange(t, mustForwarder(t, []string{u.addr}), "big.test.")
	if err != nil || len(resp.Answer) != 3 || resp.Truncated {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if got := u.networks(); got != "udp,tcp" {
		t.Errorf("networks %q, want udp,tcp", got)
	}
}

func TestForwarderServerOrder(t *testing.T) {
	first := startUpstream(t, "127.0.0.1")
	failing := startUpstream(t, "")
	second := startUpstream(t, "127.0.0.2")
	dead := deadUDPAddr(t)

	for _, tc := range []struct {
		name    string
		servers []string
		want    string
	}{
		{"first answers", []string{first.addr, second.addr}, "127.0.0.1"},
		{"dead first", []string{dead, second.addr}, "127.0.0.2"},
		{"servfail first", []string{failing.addr, second.addr}, "127.0.0.2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := exchange(t, mustForwarder(t, tc.servers), "www.test.")
			if err != nil || firstA(resp) != tc.want {
				t.Errorf("resp %v err %v, want A %s", resp, err, tc.want)
			}
		})
	}
	if n := len(second.Seen()); n != 2 {
		t.Errorf("second server saw %d queries, want 2 (it is asked only after a failure)", n)
	}

	// Every server answers SERVFAIL: the last answer is returned as is.
	resp, err := exchange(t, mustForwarder(t, []string{first.addr, second.addr}), "fail.test.")
	if err != nil || resp.Rcode != dns.RcodeServerFailure {
		t.Errorf("all SERVFAIL: resp %v err %v", resp, err)
	}
}

func TestForwarderErrors(t *testing.T) {
	u := startUpstream(t, "127.0.0.9")
	dead1, dead2 := deadUDPAddr(t), deadUDPAddr(t)
	_, err := exchange(t, mustForwarder(t, []string{dead1, dead2}), "www.test.")
	if err == nil || !strings.Contains(err.Error(), dead1) || !strings.Contains(err.Error(), dead2) {
		t.Errorf("all dead: err %v, want both addresses named", err)
	}
	_, err = exchange(t, mustForwarder(t, []string{u.addr}), "elsewhere.test.")
	if err == nil || !strings.Contains(err.Error(), "another question") {
		t.Errorf("wrong question: err %v", err)
	}
}

func TestForwarderTryTimeout(t *testing.T) {
	silent, got := silentUDP(t)
	u := startUpstream(t, "127.0.0.9")
	f := mustForwarder(t, []string{silent, u.addr}, WithTryTimeout(100*time.Millisecond))
	start := time.Now()
	resp, err := exchange(t, f, "www.test.")
	if err != nil || firstA(resp) != "127.0.0.9" {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v with a 100ms try timeout", el)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Error("the silent server was never asked")
	}

	f = mustForwarder(t, []string{silent}, WithTryTimeout(100*time.Millisecond))
	if _, err := exchange(t, f, "www.test."); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want DeadlineExceeded", err)
	}
}

func TestForwarderCancel(t *testing.T) {
	silent, got := silentUDP(t)
	f := mustForwarder(t, []string{silent}, WithTryTimeout(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.Exchange(ctx, query("www.test.", dns.TypeA))
		done <- err
	}()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("query never reached the upstream")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exchange did not return within 5s of its context's cancellation")
	}
}

func TestNewForwarder(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":      "127.0.0.1:53",
		"127.0.0.1:5353": "127.0.0.1:5353",
		"::1":            "[::1]:53",
		"[::1]":          "[::1]:53",
		"[::1]:5353":     "[::1]:5353",
	} {
		f, err := NewForwarder([]string{in})
		if err != nil || f.String() != "dns://"+want {
			t.Errorf("NewForwarder(%q) = %v, %v; want dns://%s", in, f, err, want)
		}
	}
	for _, bad := range []string{"", "localhost", "dns.example:53", "127.0.0.1:99999", "127.0.0.1:"} {
		if _, err := NewForwarder([]string{bad}); err == nil || !strings.Contains(err.Error(), "not an IP address") {
			t.Errorf("NewForwarder(%q): err %v", bad, err)
		}
	}
	if _, err := NewForwarder(nil); err == nil {
		t.Error("NewForwarder(nil): no error")
	}
}

func TestSystemUpstream(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f, err := SystemUpstream(write("ok", "search example.com\nnameserver 127.0.0.1\nnameserver ::1\noptions timeout:1 attempts:3\n"))
	if err != nil || f.String() != "dns://127.0.0.1:53,[::1]:53" || f.tryTimeout != time.Second {
		t.Errorf("SystemUpstream = %v (try timeout %v), %v", f, f.tryTimeout, err)
	}
	empty := write("empty", "search example.com\n")
	if _, err := SystemUpstream(empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("no nameserver: err %v, want the path named", err)
	}
	byName := write("byname", "nameserver dns.example\n")
	if _, err := SystemUpstream(byName); err == nil || !strings.Contains(err.Error(), byName) {
		t.Errorf("nameserver by name: err %v", err)
	}
	if _, err := SystemUpstream(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err %v", err)
	}
}

// TestAnswerThroughForwarder runs the whole path over real sockets: the
// client's EDNS DO bit reaches the upstream, the upstream's truncated UDP
// answer is fetched again over TCP, and the client gets it under its own
// Id and question spelling.
func TestAnswerThroughForwarder(t *testing.T) {
	u := startUpstream(t, "127.0.0.9")
	a := &Answerer{Decider: allowing("big.test"), Upstream: mustForwarder(t, []string{u.addr})}
	req := query("Big.Test.", dns.TypeA)
	req.SetEdns0(4096, true)
	resp, out := a.Answer(context.Background(), req, UDP)
	got, _ := roundTrip(t, resp)
	if got.Id != req.Id || got.Rcode != dns.RcodeSuccess || len(got.Answer) != 3 || got.Question[0].Name != "Big.Test." {
		t.Fatalf("reply: %v", got)
	}
	if out.Disposition != DispositionAnswered || out.Upstream != "dns://"+u.addr {
		t.Errorf("outcome %+v", out)
	}
	seen := u.Seen()
	if len(seen) != 2 || seen[0].network != "udp" || seen[1].network != "tcp" {
		t.Fatalf("upstream saw %d queries: %q", len(seen), u.networks())
	}
	opt := seen[0].msg.IsEdns0()
	if opt == nil || !opt.Do() || opt.UDPSize() != ednsUDPSize || !seen[0].msg.RecursionDesired {
		t.Errorf("upstream query: %v", seen[0].msg)
	}
}
