package harness

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/policy"
)

// TestGeneratedPolicy loads the generated policy with stockade's own
// parser and engine: the upstream ports and allowed names are allowed, the
// unlisted names are not DNS-eligible.
func TestGeneratedPolicy(t *testing.T) {
	f, err := writeFiles(fileParams{dir: t.TempDir(), names: 5, echoPort: 4000, sinkPort: 4001, binary: "/**", tinyproxyPort: 4002})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.policy)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse(f.policy, data)
	if err != nil {
		t.Fatalf("generated policy does not parse: %v\n%s", err, data)
	}
	if n := p.EndpointCount(); n != 7 {
		t.Fatalf("endpoints = %d, want 7 (2 upstream + 5 names)", n)
	}
	e := policy.NewEngine()
	if _, err := e.Load(f.policy, data); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d := e.DecideNetwork(ctx, policy.NetworkInput{Host: upstreamName, Port: 4001, Exe: "/tmp/x/loadgen"}); !d.Allow {
		t.Fatalf("upstream sink denied: %+v", d)
	}
	if d := e.DecideNetwork(ctx, policy.NetworkInput{Host: upstreamName, Port: 4002, Exe: "/tmp/x/loadgen"}); d.Allow {
		t.Fatalf("unlisted port allowed: %+v", d)
	}
	if d := e.DecideDNS(ctx, policy.DNSInput{Name: allowedName(4), QType: dns.TypeA}); !d.Allow {
		t.Fatalf("allowed name not DNS-eligible: %+v", d)
	}
	if d := e.DecideDNS(ctx, policy.DNSInput{Name: unlistedName(0), QType: dns.TypeA}); d.Allow {
		t.Fatalf("unlisted name DNS-eligible: %+v", d)
	}
	hosts, err := os.ReadFile(f.hosts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(hosts), "127.0.0.1 "+upstreamName+"\n") || strings.Contains(string(hosts), "unlisted") {
		t.Fatalf("hosts file:\n%s", hosts)
	}
	queries, err := os.ReadFile(f.queries)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(queries)), "\n"); len(lines) != 10 ||
		lines[0] != allowedName(0)+" A" || lines[1] != unlistedName(0)+" A" {
		t.Fatalf("query file must alternate allowed and unlisted names:\n%s", queries)
	}
}
