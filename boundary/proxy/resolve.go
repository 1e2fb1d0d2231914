package proxy

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/boundary/dnsproxy"
)

// Exchanger is a DNS upstream (a forwarder or a static hosts file).
type Exchanger interface {
	Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error)
}

// UpstreamResolver resolves CONNECT targets through the same upstream that
// answers the boundary's DNS, so the proxy and DNS agree on every name
// (with --hosts, both are offline).
type UpstreamResolver struct{ Up Exchanger }

// LookupNetIP implements Resolver: A then AAAA records of host. An upstream
// that answers from memory is asked directly, the same addresses in the
// same order, without building DNS messages.
func (r UpstreamResolver) LookupNetIP(ctx context.Context, _ string, host string) ([]netip.Addr, error) {
	if m, ok := r.Up.(dnsproxy.LocalUpstream); ok {
		return lookupMemory(m, host)
	}
	var out []netip.Addr
	var firstErr error
	for _, qt := range [...]uint16{dns.TypeA, dns.TypeAAAA} {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(host), qt)
		resp, err := r.Up.Exchange(ctx, q)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		for _, rr := range resp.Answer {
			switch v := rr.(type) {
			case *dns.A:
				if a, ok := netip.AddrFromSlice(v.A); ok {
					out = append(out, a.Unmap())
				}
			case *dns.AAAA:
				if a, ok := netip.AddrFromSlice(v.AAAA); ok {
					out = append(out, a)
				}
			}
		}
	}
	if len(out) == 0 {
		if firstErr != nil {
			return nil, fmt.Errorf("lookup %s: %w", host, firstErr)
		}
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return out, nil
}

func lookupMemory(m dnsproxy.LocalUpstream, host string) ([]netip.Addr, error) {
	addrs, _ := m.Lookup(host)
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs { // A records first, then AAAA, as the upstream answers them
		if a.Is4() {
			out = append(out, a)
		}
	}
	for _, a := range addrs {
		if a.Is6() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	return out, nil
}
