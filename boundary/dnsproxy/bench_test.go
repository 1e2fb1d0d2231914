package dnsproxy

import (
	"context"
	"testing"

	"github.com/miekg/dns"
)

func BenchmarkAnswer(b *testing.B) {
	a := &Answerer{
		Decider:  allowing("api.example.com"),
		Upstream: mustHosts(b, "127.0.0.10 api.example.com\n::1 api.example.com\n"),
	}
	for _, bc := range []struct {
		name  string
		qname string
		rcode int
	}{
		{"allowed-hosts", "api.example.com.", dns.RcodeSuccess},
		{"refused", "blocked.example.org.", dns.RcodeRefused},
	} {
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
