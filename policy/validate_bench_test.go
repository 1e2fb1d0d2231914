package policy

import (
	"fmt"
	"strings"
	"testing"
)

// manyPatternsPolicy is a policy of n host-pattern endpoints, half of the
// form *-svcI.example.com and half apiI-*.x.test, all on port 443, in
// policies of ten endpoints. Every endpoint has its own allowed_ips, so
// every pair of endpoints disagrees on connection metadata and only the
// hosts being disjoint keeps the policy loadable: the ambiguity check
// must compare the hosts of every pair it cannot rule out otherwise.
func manyPatternsPolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for i := 0; i < n; i++ {
		if i%10 == 0 {
			fmt.Fprintf(&b, "  p%d:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n", i/10)
		}
		host := fmt.Sprintf("*-svc%d.example.com", i)
		if i%2 == 1 {
			host = fmt.Sprintf("api%d-*.x.test", i)
		}
		fmt.Fprintf(&b, "      - {host: %q, port: 443, allowed_ips: [10.%d.%d.0/24]}\n", host, i/256, i%256)
	}
	return []byte(b.String())
}

// manyExactHostsPolicy is a policy of n exact-host endpoints; a host
// appears on two endpoints (ports 443 and 8443, different tls) when i is a
// multiple of 10, so the buckets of equal hosts are not all singletons.
func manyExactHostsPolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for i := 0; i < n; i++ {
		if i%10 == 0 {
			fmt.Fprintf(&b, "  p%d:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n", i/10)
		}
		host, port, tls := fmt.Sprintf("api%d.example.com", i), 443, ""
		if i%10 == 5 {
			host, port, tls = fmt.Sprintf("api%d.example.com", i-5), 8443, ", tls: skip"
		}
		fmt.Fprintf(&b, "      - {host: %s, port: %d%s}\n", host, port, tls)
	}
	return []byte(b.String())
}

// benchValidate times Parse of src ("parse") and the ambiguity check
// alone on its endpoints ("ambiguity"). The policy must load.
func benchValidate(b *testing.B, src []byte) {
	b.Helper()
	if _, err := Parse("bench.yaml", src); err != nil {
		b.Fatal(err)
	}
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Parse("bench.yaml", src); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ambiguity", func(b *testing.B) {
		p := &parser{file: "bench.yaml"}
		p.parse(src)
		b.ReportAllocs()
		for b.Loop() {
			q := &parser{file: "bench.yaml"}
			q.checkAmbiguity(p.endpoints)
			if len(q.errs) > 0 {
				b.Fatal(q.errs)
			}
		}
	})
}

// BenchmarkValidate1000Patterns: validation of 1,000 host-pattern
// endpoints: ones that all disagree (manyPatternsPolicy), and OpenShell's
// pattern shapes (patternPolicyN, bench_test.go) with one host-less
// endpoint.
func BenchmarkValidate1000Patterns(b *testing.B) {
	b.Run("disagreeing", func(b *testing.B) { benchValidate(b, manyPatternsPolicy(1000)) })
	b.Run("shapes", func(b *testing.B) {
		src, _ := patternPolicyN(1000)
		benchValidate(b, src)
	})
	b.Run("middles", func(b *testing.B) { benchValidate(b, middlePatternsPolicy(1000)) })
}

// middlePatternsPolicy is n patterns *.aI.*.example.com that all disagree:
// their literal ends are the same, only a middle label tells them apart.
func middlePatternsPolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "      - {host: \"*.a%d.*.example.com\", port: 443, allowed_ips: [10.%d.%d.0/24]}\n", i, i/256, i%256)
	}
	return []byte(b.String())
}

// BenchmarkValidate10000ExactHosts: validation of 10,000 exact-host
// endpoints.
func BenchmarkValidate10000ExactHosts(b *testing.B) { benchValidate(b, manyExactHostsPolicy(10000)) }
