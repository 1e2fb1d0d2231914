package dnsproxy

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

// deciderFunc is a Decider that records nothing, so that benchmarks
// measure Answer alone.
type deciderFunc func(ctx context.Context, name string, qtype uint16) Verdict

func (f deciderFunc) DecideDNS(ctx context.Context, name string, qtype uint16) Verdict {
	return f(ctx, name, qtype)
}

// benchAnswerer allows api.example.com only, answered from a hosts file.
func benchAnswerer(b *testing.B) *Answerer {
	return &Answerer{
		Decider: deciderFunc(func(_ context.Context, name string, _ uint16) Verdict {
			return Verdict{Allow: name == "api.example.com", Policy: "bench", Version: 1}
		}),
		Upstream: mustHosts(b, "127.0.0.10 api.example.com\n::1 api.example.com\n"),
	}
}

// benchCase is a query for benchAnswerer and the answer's rcode.
type benchCase struct {
	name  string
	qname string
	rcode int
}

// benchCases are an allowed and a refused query for benchAnswerer.
func benchCases() []benchCase {
	return []benchCase{
		{"allowed-hosts", "api.example.com.", dns.RcodeSuccess},
		{"refused", "blocked.example.org.", dns.RcodeRefused},
	}
}

func BenchmarkAnswer(b *testing.B) {
	a := benchAnswerer(b)
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			req := query(bc.qname, dns.TypeA)
			req.SetEdns0(1232, false)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if resp, _ := a.Answer(ctx, req, UDP); resp.Rcode != bc.rcode {
					b.Fatalf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[bc.rcode])
				}
			}
		})
	}
}

// BenchmarkAnswerPacket is BenchmarkAnswer on the fast path: ParseQuery and
// AnswerPacket from and into bytes, as the boundary answers a UDP query
// (the packing and unpacking BenchmarkAnswer leaves out included).
func BenchmarkAnswerPacket(b *testing.B) {
	a := benchAnswerer(b)
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			req := query(bc.qname, dns.TypeA)
			req.SetEdns0(1232, false)
			pkt, err := req.Pack()
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := a.WithTimeout(context.Background())
			defer cancel()
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				q, ok := ParseQuery(pkt)
				if !ok {
					b.Fatal("ParseQuery refused the query")
				}
				reply, out, _ := a.AnswerPacket(ctx, pkt, &q, buf[:0])
				if out.Rcode != bc.rcode || len(reply) == 0 {
					b.Fatalf("rcode %s, want %s", dns.RcodeToString[out.Rcode], dns.RcodeToString[bc.rcode])
				}
			}
		})
	}
}
