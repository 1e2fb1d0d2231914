package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

const testHosts = `
127.0.0.10 api.example.com
::1        api.example.com
127.0.0.11 other.example.com
`

func TestAnswerAllowed(t *testing.T) {
	a := &Answerer{Decider: allowing("api.example.com"), Upstream: mustHosts(t, testHosts)}
	req := query("api.example.com.", dns.TypeA)
	req.RecursionDesired = true
	resp, out := a.Answer(context.Background(), req, UDP)
	got, _ := roundTrip(t, resp)

	if got.Id != req.Id || !got.Response || !got.RecursionAvailable || !got.RecursionDesired {
		t.Errorf("header: id %d (want %d) qr %v ra %v rd %v", got.Id, req.Id, got.Response, got.RecursionAvailable, got.RecursionDesired)
	}
	if got.Rcode != dns.RcodeSuccess || len(got.Answer) != 1 || got.Answer[0].(*dns.A).A.String() != "127.0.0.10" {
		t.Fatalf("reply: %v", got)
	}
	want := Outcome{Name: "api.example.com", QType: dns.TypeA, Rcode: dns.RcodeSuccess, Disposition: DispositionAnswered,
		Allowed: true, Policy: "test-policy", Version: 7, Upstream: "hosts:test"}
	if out != want {
		t.Errorf("outcome %+v, want %+v", out, want)
	}
}

func TestAnswerCaseAndTrailingDot(t *testing.T) {
	d := allowing("api.example.com")
	a := &Answerer{Decider: d, Upstream: mustHosts(t, testHosts)}
	resp, out := a.Answer(context.Background(), query("API.Example.COM.", dns.TypeAAAA), UDP)
	got, _ := roundTrip(t, resp)
	if asked := d.Asked(); len(asked) != 1 || asked[0] != "api.example.com" {
		t.Errorf("decider asked %q, want [api.example.com]", asked)
	}
	if out.Name != "api.example.com" || !out.Allowed {
		t.Errorf("outcome %+v", out)
	}
	// The client's spelling is echoed (resolvers using 0x20 check it).
	if got.Question[0].Name != "API.Example.COM." || len(got.Answer) != 1 || got.Answer[0].Header().Name != "API.Example.COM." {
		t.Errorf("reply: %v", got)
	}

	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"API.Example.COM.", "api.example.com", true},
		{"api.example.com", "api.example.com", true},
		{".", "", false},
		{"", "", false},
		{`a\.b.example.com.`, `a\.b.example.com`, false},
		{`\065pi.example.com.`, `\065pi.example.com`, false},
	} {
		if got, ok := Normalize(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("Normalize(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAnswerNXDOMAINPassthrough(t *testing.T) {
	a := &Answerer{Decider: allowing("missing.example.com"), Upstream: mustHosts(t, testHosts)}
	resp, out := a.Answer(context.Background(), query("missing.example.com.", dns.TypeA), UDP)
	if resp.Rcode != dns.RcodeNameError || out.Rcode != dns.RcodeNameError {
		t.Fatalf("rcode %s, want NXDOMAIN", dns.RcodeToString[resp.Rcode])
	}
	if out.Disposition != DispositionAnswered || !out.Allowed || out.Reason != reason.None || out.Err != nil {
		t.Errorf("outcome %+v", out)
	}
}

func TestAnswerRefused(t *testing.T) {
	hosts := mustHosts(t, testHosts)
	for _, tc := range []struct {
		name       string
		decider    Decider
		qname      string
		wantReason reason.Code
		wantAsked  bool
	}{
		{"not in any policy", allowing("api.example.com"), "other.example.com.", reason.PolicyDNSIneligible, true},
		{"verdict reason kept", &fakeDecider{deny: Verdict{Reason: reason.PolicyUnavailable, Message: "no policy"}}, "api.example.com.", reason.PolicyUnavailable, true},
		{"no decider fails closed", nil, "api.example.com.", reason.PolicyUnavailable, false},
		{"escaped name never decided", allowing(`a.b.example.com`), `a\.b.example.com.`, reason.PolicyDNSIneligible, false},
		{"root", allowing(""), ".", reason.PolicyDNSIneligible, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Answerer{Decider: tc.decider, Upstream: hosts}
			req := query(tc.qname, dns.TypeA)
			resp, out := a.Answer(context.Background(), req, UDP)
			got, _ := roundTrip(t, resp)
			if got.Rcode != dns.RcodeRefused || got.Id != req.Id || len(got.Answer) != 0 {
				t.Fatalf("reply: %v", got)
			}
			if out.Disposition != DispositionRefused || out.Allowed || out.Reason != tc.wantReason || out.Upstream != "" || out.Err != nil {
				t.Errorf("outcome %+v", out)
			}
			if fd, ok := tc.decider.(*fakeDecider); ok && (len(fd.Asked()) > 0) != tc.wantAsked {
				t.Errorf("decider asked %q, want asked=%v", fd.Asked(), tc.wantAsked)
			}
		})
	}
}

func TestAnswerMalformed(t *testing.T) {
	withOpcode := func(op int) *dns.Msg { m := query("api.example.com.", dns.TypeA); m.Opcode = op; return m }
	twoQuestions := query("api.example.com.", dns.TypeA)
	twoQuestions.Question = append(twoQuestions.Question, twoQuestions.Question[0])
	noQuestion := query("api.example.com.", dns.TypeA)
	noQuestion.Question = nil
	isResponse := query("api.example.com.", dns.TypeA)
	isResponse.Response = true
	chaos := query("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	ednsV1 := query("api.example.com.", dns.TypeA)
	ednsV1.SetEdns0(1232, false)
	ednsV1.IsEdns0().SetVersion(1)

	for _, tc := range []struct {
		name  string
		req   *dns.Msg
		rcode int
	}{
		{"nil", nil, dns.RcodeFormatError},
		{"no question", noQuestion, dns.RcodeFormatError},
		{"two questions", twoQuestions, dns.RcodeFormatError},
		{"response", isResponse, dns.RcodeFormatError},
		{"class CH", chaos, dns.RcodeFormatError},
		{"opcode NOTIFY", withOpcode(dns.OpcodeNotify), dns.RcodeNotImplemented},
		{"opcode UPDATE", withOpcode(dns.OpcodeUpdate), dns.RcodeNotImplemented},
		{"EDNS version 1", ednsV1, dns.RcodeBadVers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := allowing("api.example.com", "version.bind")
			a := &Answerer{Decider: d, Upstream: mustHosts(t, testHosts)}
			resp, out := a.Answer(context.Background(), tc.req, UDP)
			got, _ := roundTrip(t, resp)
			if got.Rcode != tc.rcode || !got.Response || len(got.Answer) != 0 {
				t.Fatalf("reply rcode %s, want %s: %v", dns.RcodeToString[got.Rcode], dns.RcodeToString[tc.rcode], got)
			}
			if tc.req != nil && got.Id != tc.req.Id {
				t.Errorf("id %d, want %d", got.Id, tc.req.Id)
			}
			if out.Disposition != DispositionMalformed || out.Allowed || out.Rcode != tc.rcode || !errors.Is(out.Err, ErrMalformed) {
				t.Errorf("outcome %+v", out)
			}
			if len(d.Asked()) != 0 {
				t.Errorf("decider asked %q for a malformed query", d.Asked())
			}
		})
	}
}

// deadUDPAddr returns a 127.0.0.1 UDP address nothing listens on.
func deadUDPAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// silentUDP returns the address of a 127.0.0.1 UDP socket that never
// answers, and a channel that gets each packet it receives.
func silentUDP(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case got <- append([]byte(nil), buf[:n]...):
			default:
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc.LocalAddr().String(), got
}

func mustForwarder(t *testing.T, addrs []string, opts ...ForwarderOption) *Forwarder {
	t.Helper()
	f, err := NewForwarder(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAnswerUpstreamFailure(t *testing.T) {
	silent, _ := silentUDP(t)
	for _, tc := range []struct {
		name    string
		up      Upstream
		timeout time.Duration
		wantErr error
	}{
		{"connection refused", mustForwarder(t, []string{deadUDPAddr(t)}), time.Second, nil},
		{"timeout", mustForwarder(t, []string{silent}, WithTryTimeout(time.Minute)), 150 * time.Millisecond, context.DeadlineExceeded},
		{"no upstream", nil, time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Answerer{Decider: allowing("api.example.com"), Upstream: tc.up, Timeout: tc.timeout}
			req := query("api.example.com.", dns.TypeA)
			start := time.Now()
			resp, out := a.Answer(context.Background(), req, UDP)
			if el := time.Since(start); el > tc.timeout+2*time.Second {
				t.Errorf("Answer took %v with timeout %v", el, tc.timeout)
			}
			got, _ := roundTrip(t, resp)
			if got.Rcode != dns.RcodeServerFailure || got.Id != req.Id {
				t.Fatalf("reply: %v", got)
			}
			if out.Disposition != DispositionUpstreamFailed || !out.Allowed || out.Reason != reason.UpstreamUnreachable || out.Err == nil {
				t.Errorf("outcome %+v", out)
			}
			if tc.wantErr != nil && !errors.Is(out.Err, tc.wantErr) {
				t.Errorf("err %v, want %v", out.Err, tc.wantErr)
			}
			if tc.up != nil && out.Upstream != tc.up.String() {
				t.Errorf("outcome upstream %q, want %q", out.Upstream, tc.up.String())
			}
		})
	}
}

func TestAnswerInjectedFaults(t *testing.T) {
	set := fault.NewSet()
	d := allowing("api.example.com")
	a := &Answerer{Decider: d, Upstream: mustHosts(t, testHosts), Injector: set}
	ask := func() (*dns.Msg, Outcome) {
		return a.Answer(context.Background(), query("api.example.com.", dns.TypeA), UDP)
	}

	set.Arm(fault.DNSQuery, fault.Rule{Kind: fault.KindError, Count: 1})
	resp, out := ask()
	if resp.Rcode != dns.RcodeServerFailure || out.Disposition != DispositionFault || out.Reason != reason.BoundaryFault ||
		out.Allowed || !errors.Is(out.Err, fault.ErrInjected) {
		t.Errorf("dns.query error: rcode %s outcome %+v", dns.RcodeToString[resp.Rcode], out)
	}
	if len(d.Asked()) != 0 {
		t.Errorf("decider asked %q after a dns.query fault", d.Asked())
	}

	set.Arm(fault.DNSUpstream, fault.Rule{Kind: fault.KindError, Count: 1})
	resp, out = ask()
	if resp.Rcode != dns.RcodeServerFailure || out.Disposition != DispositionUpstreamFailed || out.Reason != reason.UpstreamUnreachable ||
		!out.Allowed || !errors.Is(out.Err, fault.ErrInjected) {
		t.Errorf("dns.upstream error: rcode %s outcome %+v", dns.RcodeToString[resp.Rcode], out)
	}

	// Both rules had Count 1: the next query is answered normally.
	if resp, out = ask(); resp.Rcode != dns.RcodeSuccess || out.Disposition != DispositionAnswered {
		t.Errorf("after faults: rcode %s outcome %+v", dns.RcodeToString[resp.Rcode], out)
	}

	for _, p := range []fault.Point{fault.DNSQuery, fault.DNSUpstream} {
		set.Arm(p, fault.Rule{Kind: fault.KindPanic, Count: 1})
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), string(p)) {
					t.Errorf("%s panic: recovered %v", p, r)
				}
			}()
			ask()
			t.Errorf("%s panic: Answer returned", p)
		}()
	}
	for p, want := range map[fault.Point]int{fault.DNSQuery: 2, fault.DNSUpstream: 2} {
		if n := set.Fired(p); n != want {
			t.Errorf("%s fired %d times, want %d", p, n, want)
		}
	}
}

func TestAnswerTruncation(t *testing.T) {
	var hosts strings.Builder
	const n = 60
	for i := range n {
		fmt.Fprintf(&hosts, "127.1.0.%d big.example.com\n", i+1)
	}
	a := &Answerer{Decider: allowing("big.example.com"), Upstream: mustHosts(t, hosts.String())}
	withEDNS := func(size uint16) *dns.Msg {
		m := query("big.example.com.", dns.TypeA)
		m.SetEdns0(size, true)
		return m
	}
	for _, tc := range []struct {
		name     string
		req      *dns.Msg
		tr       Transport
		limit    int
		wantTC   bool
		wantEDNS bool
	}{
		{"udp plain", query("big.example.com.", dns.TypeA), UDP, 512, true, false},
		{"udp edns 600", withEDNS(600), UDP, 600, true, true},
		{"udp edns below 512", withEDNS(100), UDP, 512, true, true},
		{"udp edns 4096", withEDNS(4096), UDP, 4096, false, true},
		{"tcp plain", query("big.example.com.", dns.TypeA), TCP, dns.MaxMsgSize, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := a.Answer(context.Background(), tc.req, tc.tr)
			got, size := roundTrip(t, resp)
			if size > tc.limit {
				t.Errorf("reply is %d bytes, limit %d", size, tc.limit)
			}
			if got.Truncated != tc.wantTC || (len(got.Answer) < n) != tc.wantTC || len(got.Answer) == 0 {
				t.Errorf("TC %v with %d of %d answers, want TC %v", got.Truncated, len(got.Answer), n, tc.wantTC)
			}
			if opt := got.IsEdns0(); (opt != nil) != tc.wantEDNS || (opt != nil && (!opt.Do() || opt.Version() != 0)) {
				t.Errorf("OPT %v, want present=%v with DO", opt, tc.wantEDNS)
			}
			if out.Disposition != DispositionAnswered || out.Rcode != dns.RcodeSuccess {
				t.Errorf("outcome %+v", out)
			}
		})
	}
}

func TestReplyHelpers(t *testing.T) {
	req := query("x.example.com.", dns.TypeA)
	req.SetEdns0(4096, false)
	for _, tc := range []struct {
		f     func(*dns.Msg) *dns.Msg
		rcode int
	}{{Refused, dns.RcodeRefused}, {ServFail, dns.RcodeServerFailure}, {FormErr, dns.RcodeFormatError}} {
		got, _ := roundTrip(t, tc.f(req))
		if got.Rcode != tc.rcode || got.Id != req.Id || !got.Response || got.IsEdns0() == nil ||
			len(got.Question) != 1 || got.Question[0] != req.Question[0] {
			t.Errorf("%s reply: %v", dns.RcodeToString[tc.rcode], got)
		}
		if nilReply, _ := roundTrip(t, tc.f(nil)); nilReply.Rcode != tc.rcode {
			t.Errorf("%s reply to nil: %v", dns.RcodeToString[tc.rcode], nilReply)
		}
	}
}

func TestMalformedPacket(t *testing.T) {
	req := query("api.example.com.", dns.TypeA)
	req.Opcode = dns.OpcodeQuery
	b, err := req.Pack()
	if err != nil {
		t.Fatal(err)
	}
	broken := append(b[:12:12], 0x3f, 'x') // header, then a label running off the end
	if err := new(dns.Msg).Unpack(broken); err == nil {
		t.Fatal("broken packet unpacked")
	}
	m := MalformedPacket(broken)
	if m == nil {
		t.Fatal("no reply to a packet with a readable header")
	}
	got, _ := roundTrip(t, m)
	if got.Id != req.Id || got.Rcode != dns.RcodeFormatError || !got.Response || !got.RecursionDesired {
		t.Errorf("reply: %v", got)
	}
	if m := MalformedPacket(b[:11]); m != nil {
		t.Errorf("reply to an 11-byte packet: %v", m)
	}
	resp := append([]byte(nil), broken...)
	resp[2] |= 0x80 // QR
	if m := MalformedPacket(resp); m != nil {
		t.Errorf("reply to a response: %v", m)
	}
}

func TestAcceptFunc(t *testing.T) {
	if got := AcceptFunc(dns.Header{Bits: 1 << 15, Qdcount: 1}); got != dns.MsgIgnore {
		t.Errorf("response: %v, want MsgIgnore", got)
	}
	if got := AcceptFunc(dns.Header{Bits: uint16(dns.OpcodeUpdate) << 11, Qdcount: 2}); got != dns.MsgAccept {
		t.Errorf("update with 2 questions: %v, want MsgAccept", got)
	}
}

func TestEnumStrings(t *testing.T) {
	for want, d := range map[string]Disposition{"unknown": DispositionUnknown, "answered": DispositionAnswered,
		"refused": DispositionRefused, "malformed": DispositionMalformed, "upstream_failed": DispositionUpstreamFailed,
		"fault": DispositionFault, "disposition(9)": 9} {
		if d.String() != want {
			t.Errorf("Disposition(%d) = %q, want %q", int(d), d.String(), want)
		}
	}
	for network, want := range map[string]Transport{"udp": UDP, "udp6": UDP, "tcp": TCP, "tcp4": TCP, "": UDP} {
		if got := TransportOf(network); got != want {
			t.Errorf("TransportOf(%q) = %v, want %v", network, got, want)
		}
	}
	if UDP.String() != "udp" || TCP.String() != "tcp" || Transport(5).String() != "transport(5)" {
		t.Error("Transport.String")
	}
}
