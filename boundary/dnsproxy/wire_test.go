package dnsproxy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/chaos/fault"
)

// wireHosts has a name with many addresses, so that an ANY or AAAA answer
// overflows 512 bytes and must be truncated.
func wireHosts(t testing.TB) *Hosts {
	var b strings.Builder
	b.WriteString("127.0.0.10 api.example.com\n::1 api.example.com\n127.0.0.11 other.example.com\n")
	for i := range 40 {
		fmt.Fprintf(&b, "2001:db8::%x many.example.com\n10.0.0.%d many.example.com\n", i+1, i+1)
	}
	return mustHosts(t, b.String())
}

func pack(t testing.TB, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack query: %v", err)
	}
	return b
}

// slowAnswer is the miekg/dns path the boundary takes for packets that
// ParseQuery does not accept: unpack, Answer, pack.
func slowAnswer(t testing.TB, a *Answerer, p []byte) ([]byte, Outcome) {
	t.Helper()
	req := new(dns.Msg)
	if err := req.Unpack(p); err != nil {
		t.Fatalf("a packet ParseQuery accepted does not unpack: %v", err)
	}
	resp, out := a.Answer(context.Background(), req, UDP)
	b, err := resp.Pack()
	if err != nil {
		t.Fatalf("pack reply: %v", err)
	}
	return b, out
}

// sameAnswer checks that AnswerPacket answers p as Answer does.
func sameAnswer(t testing.TB, fast, slow *Answerer, p []byte) {
	t.Helper()
	q, ok := ParseQuery(p)
	if !ok {
		t.Fatalf("ParseQuery refused %x", p)
	}
	prefix := []byte("prefix")
	got, gotOut, pending := fast.AnswerPacket(context.Background(), p, &q, append([]byte(nil), prefix...))
	if pending {
		t.Fatalf("pending with a local upstream")
	}
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("AnswerPacket did not append to dst")
	}
	got = got[len(prefix):]
	want, wantOut := slowAnswer(t, slow, p)
	if !bytes.Equal(got, want) {
		gm, wm := new(dns.Msg), new(dns.Msg)
		_, _ = gm.Unpack(got), wm.Unpack(want)
		t.Fatalf("reply bytes differ\nfast %x\n%v\nslow %x\n%v", got, gm, want, wm)
	}
	if fmt.Sprint(gotOut.Err) != fmt.Sprint(wantOut.Err) {
		t.Fatalf("outcome error %v, want %v", gotOut.Err, wantOut.Err)
	}
	gotOut.Err, wantOut.Err = nil, nil
	if gotOut != wantOut {
		t.Fatalf("outcome\n%+v, want\n%+v", gotOut, wantOut)
	}
}

func TestAnswerPacketMatchesAnswer(t *testing.T) {
	hosts := wireHosts(t)
	dec := allowing("api.example.com", "many.example.com", "missing.example.com", "other.example.com")
	mk := func(name string, qtype uint16, edit func(*dns.Msg)) []byte {
		m := query(name, qtype)
		if edit != nil {
			edit(m)
		}
		return pack(t, m)
	}
	edns := func(size uint16, do bool) func(*dns.Msg) { return func(m *dns.Msg) { m.SetEdns0(size, do) } }
	cases := map[string][]byte{
		"allowed A":            mk("api.example.com.", dns.TypeA, nil),
		"allowed AAAA mixed":   mk("API.Example.COM.", dns.TypeAAAA, nil),
		"allowed ANY":          mk("api.example.com.", dns.TypeANY, nil),
		"known, no record":     mk("api.example.com.", dns.TypeMX, nil),
		"NXDOMAIN":             mk("missing.example.com.", dns.TypeA, nil),
		"refused":              mk("blocked.example.org.", dns.TypeA, nil),
		"refused, _ and -":     mk("_srv._tcp.my-host.example.org.", dns.TypeSRV, nil),
		"no RD, CD set":        mk("api.example.com.", dns.TypeA, func(m *dns.Msg) { m.RecursionDesired, m.CheckingDisabled = false, true }),
		"AD, AA, TC, Z in req": mk("api.example.com.", dns.TypeA, func(m *dns.Msg) { m.AuthenticatedData, m.Authoritative, m.Truncated, m.Zero = true, true, true, true }),
		"EDNS":                 mk("api.example.com.", dns.TypeA, edns(4096, false)),
		"EDNS DO":              mk("api.example.com.", dns.TypeA, edns(1232, true)),
		"EDNS small size":      mk("many.example.com.", dns.TypeANY, edns(100, true)),
		"EDNS refused":         mk("blocked.example.org.", dns.TypeA, edns(1232, true)),
		"EDNS NXDOMAIN":        mk("missing.example.com.", dns.TypeAAAA, edns(1232, false)),
		"truncated ANY":        mk("many.example.com.", dns.TypeANY, nil),
		"truncated AAAA":       mk("many.example.com.", dns.TypeAAAA, nil),
		"big enough with EDNS": mk("many.example.com.", dns.TypeANY, edns(4096, false)),
		"truncated under EDNS": mk("many.example.com.", dns.TypeANY, edns(600, false)),
		"63-byte label":        mk(strings.Repeat("a", 63)+".example.com.", dns.TypeA, nil),
		"long name":            mk(strings.Repeat(strings.Repeat("b", 60)+".", 4)+"x.", dns.TypeA, nil),
		"cookie and padding": mk("api.example.com.", dns.TypeA, func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			opt := m.IsEdns0()
			opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
				&dns.EDNS0_PADDING{Padding: make([]byte, 20)})
		}),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			plain := &Answerer{Decider: dec, Upstream: hosts}
			sameAnswer(t, plain, plain, p)
			// The fault points fire in the same order with the same effect.
			for _, pt := range []fault.Point{fault.DNSQuery, fault.DNSUpstream} {
				fs, ss := fault.NewSet(), fault.NewSet()
				fs.Arm(pt, fault.Rule{Kind: fault.KindError, Count: 1})
				ss.Arm(pt, fault.Rule{Kind: fault.KindError, Count: 1})
				sameAnswer(t, &Answerer{Decider: dec, Upstream: hosts, Injector: fs},
					&Answerer{Decider: dec, Upstream: hosts, Injector: ss}, p)
				if fs.Fired(pt) != ss.Fired(pt) {
					t.Fatalf("%s fired %d times on the fast path, %d on the slow", pt, fs.Fired(pt), ss.Fired(pt))
				}
			}
			// No decider: policy_unavailable, as Answer.
			sameAnswer(t, &Answerer{Upstream: hosts}, &Answerer{Upstream: hosts}, p)
		})
	}
}

func TestParseQueryRefusesTheUnusual(t *testing.T) {
	base := func() *dns.Msg { return query("api.example.com.", dns.TypeA) }
	withOpt := func(o dns.EDNS0) []byte {
		m := base()
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, o)
		return pack(t, m)
	}
	good := pack(t, base())
	cases := map[string][]byte{
		"response": pack(t, base().SetRcode(base(), dns.RcodeSuccess)),
		"notify":   func() []byte { m := base(); m.Opcode = dns.OpcodeNotify; return pack(t, m) }(),
		"root":     pack(t, query(".", dns.TypeNS)),
		"escaped":  pack(t, query(`a\.b.example.com.`, dns.TypeA)),
		"star":     pack(t, query(`*.example.com.`, dns.TypeA)),
		"class CH": func() []byte { m := base(); m.Question[0].Qclass = dns.ClassCHAOS; return pack(t, m) }(),
		"2 qs":     func() []byte { m := base(); m.Question = append(m.Question, m.Question[0]); return pack(t, m) }(),
		"no q":     func() []byte { m := base(); m.Question = nil; return pack(t, m) }(),
		"answer rr": func() []byte {
			m := base()
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "a.", Rrtype: dns.TypeA, Class: 1}}}
			return pack(t, m)
		}(),
		"EDNS v1":    func() []byte { m := base(); m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1); return pack(t, m) }(),
		"subnet opt": withOpt(&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{10, 0, 0, 0}}),
		"nsid opt":   withOpt(&dns.EDNS0_NSID{Code: dns.EDNS0NSID}),
		"trailing":   append(append([]byte(nil), good...), 0),
		"short":      good[:len(good)-1],
		"header":     good[:12],
		"pointer":    append(append(append([]byte(nil), good[:12]...), 0xC0, 12), 0, 1, 0, 1),
		"tsig": func() []byte {
			m := base()
			m.SetTsig("key.", dns.HmacSHA256, 300, 0)
			b, _, err := dns.TsigGenerate(m, "c2VjcmV0", "", false)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}(),
	}
	for name, p := range cases {
		if _, ok := ParseQuery(p); ok {
			t.Errorf("%s: ParseQuery accepted %x", name, p)
		}
	}
	if _, ok := ParseQuery(good); !ok {
		t.Fatalf("ParseQuery refused a plain query")
	}
}

// TestAnswerPacketPendingForRemote: with an upstream that is not local, an
// allowed name is left for Forward (the decision made once, fault.DNSQuery
// fired once), and Forward answers it as Answer would.
func TestAnswerPacketPendingForRemote(t *testing.T) {
	up := startUpstream(t, "127.0.0.1")
	fw := mustForwarder(t, []string{up.addr})
	dec := allowing("api.example.com")
	fs := fault.NewSet()
	a := &Answerer{Decider: dec, Upstream: fw, Injector: fs}
	p := pack(t, query("api.example.com.", dns.TypeA))
	q, _ := ParseQuery(p)
	dst, out, pending := a.AnswerPacket(context.Background(), p, &q, nil)
	if !pending || len(dst) != 0 || !out.Allowed || out.Disposition != DispositionUnknown {
		t.Fatalf("pending %v, %d bytes, outcome %+v", pending, len(dst), out)
	}
	req := new(dns.Msg)
	if err := req.Unpack(p); err != nil {
		t.Fatal(err)
	}
	fs.Arm(fault.DNSQuery, fault.Rule{Kind: fault.KindPanic}) // must not fire again
	resp, out := a.Forward(context.Background(), req, UDP, out)
	if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 || resp.Id != req.Id {
		t.Fatalf("forwarded reply %v", resp)
	}
	if out.Disposition != DispositionAnswered || out.Upstream != fw.String() || out.Policy != "test-policy" || out.Rcode != dns.RcodeSuccess {
		t.Fatalf("outcome %+v", out)
	}
	if asked := dec.Asked(); len(asked) != 1 {
		t.Fatalf("decider asked %d times", len(asked))
	}
	// A refused name is answered at once, even with a remote upstream.
	p = pack(t, query("nope.example.com.", dns.TypeA))
	q, _ = ParseQuery(p)
	fs.Disarm(fault.DNSQuery)
	dst, out, pending = a.AnswerPacket(context.Background(), p, &q, nil)
	if pending || out.Rcode != dns.RcodeRefused || len(dst) == 0 {
		t.Fatalf("refused: pending %v outcome %+v", pending, out)
	}
}

// FuzzParseQuery: whatever ParseQuery accepts unpacks with miekg/dns to the
// same question and header bits, and AnswerPacket answers it byte for byte
// as Answer does.
func FuzzParseQuery(f *testing.F) {
	for _, m := range []*dns.Msg{
		query("api.example.com.", dns.TypeA), query("many.example.com.", dns.TypeANY),
		query("Other.Example.com.", dns.TypeAAAA).SetEdns0(1232, true), query("x.test.", dns.TypeTXT).SetEdns0(100, false),
	} {
		f.Add(pack(f, m))
	}
	hosts := wireHosts(f)
	a := &Answerer{Decider: allowing("api.example.com", "many.example.com", "other.example.com"), Upstream: hosts}
	f.Fuzz(func(t *testing.T, p []byte) {
		q, ok := ParseQuery(p)
		if !ok {
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(p); err != nil {
			t.Fatalf("accepted %x, miekg: %v", p, err)
		}
		name, _ := Normalize(req.Question[0].Name)
		opt := req.IsEdns0()
		if name != q.Name || req.Question[0].Qtype != q.QType || req.Id != q.ID || req.RecursionDesired != q.RD ||
			req.CheckingDisabled != q.CD || (opt != nil) != q.EDNS || opt != nil && (opt.UDPSize() != q.UDPSize || opt.Do() != q.DO) {
			t.Fatalf("parsed %+v, miekg %v", q, req)
		}
		sameAnswer(t, a, a, p)
	})
}
