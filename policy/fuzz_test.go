package policy

import (
	"context"
	"errors"
	"testing"
)

// FuzzParse: any input either parses into a policy the engine can compile
// and decide with, or yields an ErrorList whose errors all have a position.
// It must never panic. Seeds: testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(semanticsPolicy))
	f.Fuzz(func(t *testing.T, data []byte) {
		pol, err := Parse("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %v", err)
			}
			for _, e := range list {
				if e.Line < 1 || e.Col < 0 || e.Msg == "" || e.File != "fuzz.yaml" {
					t.Fatalf("error without a position or message: %#v", e)
				}
			}
			return
		}
		if pol == nil || pol.Version != 1 {
			t.Fatalf("valid policy %#v", pol)
		}
		e := NewEngine()
		if _, err := e.Load("fuzz.yaml", data); err != nil {
			t.Fatalf("Parse accepted what Load rejects: %v", err)
		}
		for _, np := range pol.NetworkPolicies {
			for _, ep := range np.Endpoints {
				host := ep.Host
				if ep.Wildcard {
					host = "x" + host[1:]
				}
				d := e.DecideNetwork(context.Background(), NetworkInput{Host: host, Port: ep.Ports[0], IdentityNone: true})
				if !d.Allow {
					t.Fatalf("listed endpoint %s:%d denied: %+v", host, ep.Ports[0], d)
				}
				if d := e.DecideDNS(context.Background(), DNSInput{Name: host}); !d.Allow {
					t.Fatalf("listed host %s not DNS-eligible: %+v", host, d)
				}
			}
		}
	})
}
