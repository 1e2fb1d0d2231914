package dnsproxy

import (
	"bytes"
	"context"
	"testing"

	"github.com/miekg/dns"
)

// FuzzAnswer feeds arbitrary packets through unpack and Answer, as the
// boundary's server does, and checks that nothing panics, that every reply
// packs within the transport's limit under the query's Id, and that Answer
// leaves the query untouched. Seeds: testdata/fuzz/FuzzAnswer.
func FuzzAnswer(f *testing.F) {
	hosts := mustHosts(f, "127.0.0.10 api.example.com\n::1 api.example.com\n")
	a := &Answerer{Decider: allowing("api.example.com", "missing.example.com"), Upstream: hosts}
	f.Fuzz(func(t *testing.T, p []byte) {
		req := new(dns.Msg)
		if err := req.Unpack(p); err != nil {
			if m := MalformedPacket(p); m != nil {
				roundTrip(t, m)
			}
			return
		}
		before, packErr := req.Pack()
		for _, tr := range []Transport{UDP, TCP} {
			resp, out := a.Answer(context.Background(), req, tr)
			b, err := resp.Pack()
			if err != nil {
				t.Fatalf("%s: pack reply: %v\nquery: %v\nreply: %v", tr, err, req, resp)
			}
			limit := dns.MaxMsgSize
			if tr == UDP {
				limit = dns.MinMsgSize
				if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > limit {
					limit = int(opt.UDPSize())
				}
			}
			if len(b) > limit {
				t.Errorf("%s: reply of %d bytes over the %d limit", tr, len(b), limit)
			}
			if resp.Id != req.Id || !resp.Response || out.Rcode != resp.Rcode || out.Disposition == DispositionUnknown {
				t.Errorf("%s: reply id %d (query %d) qr %v outcome %+v", tr, resp.Id, req.Id, resp.Response, out)
			}
		}
		if after, err := req.Pack(); packErr == nil && (err != nil || !bytes.Equal(before, after)) {
			t.Errorf("Answer modified the query")
		}
	})
}
