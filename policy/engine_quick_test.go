package policy

import (
	"context"
	"os"
	"testing"
)

func TestQuick(t *testing.T) {
	data, _ := os.ReadFile("testdata/compat/crates_openshell-supervisor-network_testdata_sandbox-policy.yaml")
	e := NewEngine()
	v, err := e.Load("x.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(v)
	for _, in := range []NetworkInput{
		{Host: "API.anthropic.com.", Port: 443, Exe: "/usr/bin/node"},
		{Host: "api.anthropic.com", Port: 443, Exe: "/usr/bin/curl"},
		{Host: "api.anthropic.com", Port: 443, Exe: "/usr/bin/curl", IdentityNone: true},
		{Host: "example.org", Port: 443, Exe: "/usr/bin/curl"},
		{Host: "github.com", Port: 443, Exe: "/home/bob/.local/bin/copilot"},
		{Host: "github.com", Port: 443, Exe: "/x", Ancestors: []string{"/usr/lib/node_modules/@github/copilot/node_modules/@github/a/b/copilot"}},
	} {
		t.Logf("%+v -> %+v", in, e.DecideNetwork(context.Background(), in))
	}
	t.Logf("%+v", e.DecideDNS(context.Background(), DNSInput{Name: "gitlab.com", QType: 1}))
	t.Logf("%+v", e.DecideDNS(context.Background(), DNSInput{Name: "gitlab.org", QType: 1}))
}
