package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/policy"
)

// TestPolicyEvalKeys: text and JSON print the same camelCase keys in the
// same order, and leave out the same empty values.
func TestPolicyEvalKeys(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       policy.Decision
		network bool
		keys    []string
	}{
		{"allowed connection", policy.Decision{Allow: true, Reason: "allowed", Policy: "api", Message: "ok", Version: 2, ExactHost: true,
			AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, true,
			[]string{"allow", "reason", "policy", "message", "version", "exactHost", "allowedIps"}},
		{"denied, no policy", policy.Decision{Reason: "no_matching_policy", Message: "no policy allows x:1", Version: 1}, true,
			[]string{"allow", "reason", "message", "version"}},
		{"allowed DNS", policy.Decision{Allow: true, Reason: "allowed", Policy: "api", Version: 1, ExactHost: true}, false,
			[]string{"allow", "reason", "policy", "version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var text, js bytes.Buffer
			if err := printDecision(&text, "text", tc.d, tc.network); err != nil {
				t.Fatal(err)
			}
			if err := printDecision(&js, "json", tc.d, tc.network); err != nil {
				t.Fatal(err)
			}
			var textKeys []string
			for _, l := range strings.Split(strings.TrimSpace(text.String()), "\n") {
				textKeys = append(textKeys, strings.Fields(l)[0])
			}
			dec := json.NewDecoder(&js)
			var jsonKeys []string
			if _, err := dec.Token(); err != nil { // {
				t.Fatal(err)
			}
			for dec.More() {
				k, _ := dec.Token()
				jsonKeys = append(jsonKeys, k.(string))
				var v any
				if err := dec.Decode(&v); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(textKeys, tc.keys) || !slices.Equal(jsonKeys, tc.keys) {
				t.Fatalf("text keys %q, json keys %q, want %q\n%s", textKeys, jsonKeys, tc.keys, text.String())
			}
		})
	}
}

func TestPolicyCheckBaselineAndWarnings(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte("version: 1\nfilesystem_policy:\n  read_only: [/usr]\n  read_write: [/tmp]\nnetwork_policies:\n  l:\n    name: l\n    endpoints: [{ host: 127.0.0.1, port: 18080 }]\n    binaries: [{ path: /usr/bin/curl }]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printBaseline(&out, pol)
	got := out.String()
	if !strings.HasPrefix(got, "baseline (added to every sandbox): read-only /bin /sbin /lib") ||
		!strings.Contains(got, "; read-write /var/tmp /dev/shm /sandbox") || strings.Contains(got, "read-only /usr") {
		t.Fatalf("baseline line %q", got)
	}
	if w := pol.BoundaryWarnings(); len(w) != 1 || !strings.Contains(w[0].String(), "stockade gateway run --allow-loopback-upstream") {
		t.Fatalf("warnings %v", w)
	}
}

// TestPolicyCheckShowsPtrace: policy check says whether the sandbox's
// processes may ptrace one another, where the file sets it, and that it
// is a stockade extension.
func TestPolicyCheckShowsPtrace(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"version: 1\n", "stockade.allow_ptrace: false (default): ptrace, process_vm_readv and process_vm_writev between the sandbox's processes fail with EPERM\n"},
		{"version: 1\nstockade:\n  allow_ptrace: true\n", "stockade.allow_ptrace: true (p.yaml:3:3; a stockade extension): the sandbox's processes may ptrace"},
	} {
		pol, err := policy.Parse("p.yaml", []byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		printExtensions(&out, pol)
		if !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("%q: %q, want %q", tc.src, out.String(), tc.want)
		}
	}
}
