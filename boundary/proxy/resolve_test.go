package proxy_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/boundary/dnsproxy"
	"github.com/stockade-dev/stockade/boundary/proxy"
)

// exchangeOnly hides the hosts file's in-memory lookup: the resolver then
// asks it with DNS messages, the reference answer.
type exchangeOnly struct{ up proxy.Exchanger }

func (e exchangeOnly) Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	return e.up.Exchange(ctx, req)
}

// The in-memory lookup of a hosts file gives the addresses the DNS
// messages give, in the same order, and the same failure for a name the
// file does not list.
func TestMemoryLookupMatchesExchange(t *testing.T) {
	h, err := dnsproxy.ParseHosts(strings.NewReader(`
10.0.0.1 both.test
fd00::1 both.test
::ffff:10.0.0.9 both.test
10.0.0.2 both.test
fd00::2 six.test
10.0.0.3 four.test Alias.Test
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	fast, slow := proxy.UpstreamResolver{Up: h}, proxy.UpstreamResolver{Up: exchangeOnly{h}}
	for _, name := range []string{"both.test", "six.test", "four.test", "alias.test", "missing.test", "sub.four.test"} {
		got, gerr := fast.LookupNetIP(context.Background(), "ip", name)
		want, werr := slow.LookupNetIP(context.Background(), "ip", name)
		if !slices.Equal(got, want) || (gerr == nil) != (werr == nil) {
			t.Errorf("%s: in memory %v, %v; by messages %v, %v", name, got, gerr, want, werr)
		}
	}
}
