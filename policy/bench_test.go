package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// syntheticPolicy has n endpoints in n/10 network policies; every fifth
// endpoint is a wildcard host, and each policy allows two exact binaries
// and one glob.
func syntheticPolicy(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for p := 0; p < (n+9)/10; p++ {
		fmt.Fprintf(&b, "  p%d:\n    name: policy-%d\n    endpoints:\n", p, p)
		for i := p * 10; i < min(n, (p+1)*10); i++ {
			fmt.Fprintf(&b, "      - { host: %q, ports: [443, %d] }\n", syntheticHost(i), 8000+i%100)
		}
		fmt.Fprintf(&b, "    binaries:\n      - { path: /usr/bin/tool%d }\n      - { path: /usr/local/bin/agent%d }\n      - { path: \"/opt/p%d/**/bin/*\" }\n", p, p, p)
	}
	return []byte(b.String())
}

func syntheticHost(i int) string {
	if i%5 == 4 {
		return fmt.Sprintf("*.svc%d.example.net", i)
	}
	return fmt.Sprintf("api%d.example.com", i)
}

// syntheticInputs is a mix of allowed (exact, wildcard, glob ancestor),
// binary_not_allowed and endpoint_not_allowed requests.
func syntheticInputs(n int) []NetworkInput {
	var ins []NetworkInput
	for i := 0; i < n; i++ {
		p := i / 10
		host := syntheticHost(i)
		if strings.HasPrefix(host, "*.") {
			host = "node7" + host[1:]
		}
		switch i % 4 {
		case 0:
			ins = append(ins, NetworkInput{Host: host, Port: 443, Exe: fmt.Sprintf("/usr/bin/tool%d", p), Ancestors: []string{"/usr/bin/bash", "/sbin/init"}})
		case 1:
			ins = append(ins, NetworkInput{Host: strings.ToUpper(host), Port: 443, Exe: "/usr/bin/python3", Ancestors: []string{fmt.Sprintf("/opt/p%d/x/y/bin/run", p), "/usr/bin/bash"}})
		case 2:
			ins = append(ins, NetworkInput{Host: host, Port: 443, Exe: "/usr/bin/wget", Ancestors: []string{"/usr/bin/bash"}})
		case 3:
			ins = append(ins, NetworkInput{Host: fmt.Sprintf("nowhere%d.example.org", i), Port: 443, Exe: "/usr/bin/curl"})
		}
	}
	return ins
}

func benchEngine(b *testing.B, endpoints int, opts ...Option) (*Engine, []NetworkInput) {
	b.Helper()
	e := NewEngine(opts...)
	if _, err := e.Load("synthetic.yaml", syntheticPolicy(endpoints)); err != nil {
		b.Fatal(err)
	}
	return e, syntheticInputs(endpoints)
}

// benchDecide runs decisions over the inputs, timing each one, and reports
// the p50 and p99 latency next to ns/op.
func benchDecide(b *testing.B, e *Engine, ins []NetworkInput) {
	ctx := context.Background()
	for _, in := range ins { // warm the cache (a no-op without one)
		e.DecideNetwork(ctx, in)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		d := e.DecideNetwork(ctx, ins[i%len(ins)])
		lat = append(lat, time.Since(t0))
		if d.Version == 0 {
			b.Fatal(d.Message)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// reportLatency reports the p50 and p99 of per-operation latencies.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

func BenchmarkDecide10Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 10, WithCacheSize(0))
	benchDecide(b, e, ins)
}

func BenchmarkDecide1000Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 1000, WithCacheSize(0))
	benchDecide(b, e, ins)
}

func BenchmarkDecide10EndpointsCached(b *testing.B) {
	e, ins := benchEngine(b, 10)
	benchDecide(b, e, ins)
}

func BenchmarkDecide1000EndpointsCached(b *testing.B) {
	e, ins := benchEngine(b, 1000)
	benchDecide(b, e, ins)
}

// BenchmarkOPAFloor is the cost of the cheapest possible OPA evaluation
// (one rule returning an input field), with the engine's eval options: the
// fixed per-decision overhead no Rego change can remove.
func BenchmarkOPAFloor(b *testing.B) {
	ctx := context.Background()
	c := ast.NewCompiler()
	mod := ast.MustParseModuleWithOpts("package t\np := input.a", ast.ParserOptions{RegoVersion: ast.RegoV1})
	if c.Compile(map[string]*ast.Module{"t": mod}); c.Failed() {
		b.Fatal(c.Errors)
	}
	pq, err := rego.New(rego.Query("data.t.p"), rego.Compiler(c), rego.Store(inmem.NewFromASTObject(ast.NewObject()))).PrepareForEval(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := &snapshot{version: 1, noCancel: topdown.NewCancel()}
	in := ast.NewObject([2]*ast.Term{ast.StringTerm("a"), ast.StringTerm("x")})
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(in), rego.EvalGenerateJSON(keepAST),
			rego.EvalMetrics(metrics.NoOp()), rego.EvalExternalCancel(s.noCancel))
		lat = append(lat, time.Since(t0))
		if err != nil || len(rs) != 1 {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// patternPolicy1000 is a policy of 1,000 endpoints in OpenShell's pattern
// shapes (partial first label, middle label, any depth) and one host-less
// allowed_ips endpoint on its own port, with inputs that each match one
// pattern.
func patternPolicy1000() ([]byte, []NetworkInput) {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	var ins []NetworkInput
	for i := 0; i < 1000; i++ {
		var host, query string
		switch i % 3 {
		case 0:
			host, query = fmt.Sprintf("*-svc%d.example.com", i), fmt.Sprintf("eu-svc%d.example.com", i)
		case 1:
			host, query = fmt.Sprintf("*.s3.*.region%d.example.net", i), fmt.Sprintf("bucket.s3.eu.region%d.example.net", i)
		default:
			host, query = fmt.Sprintf("**.deep%d.example.org", i), fmt.Sprintf("a.b.c.deep%d.example.org", i)
		}
		fmt.Fprintf(&b, "  p%d:\n    endpoints: [{ host: %q, port: 443 }]\n    binaries: [{ path: /usr/bin/curl }]\n", i, host)
		ins = append(ins, NetworkInput{Host: query, Port: 443, Exe: "/usr/bin/curl"})
	}
	b.WriteString("  hostless:\n    endpoints: [{ port: 8443, allowed_ips: [10.0.0.0/8] }]\n    binaries: [{ path: /usr/bin/curl }]\n")
	return []byte(b.String()), ins
}

// BenchmarkDecide1000Patterns: uncached decisions against 1,000 pattern
// endpoints (the per-version pattern index, evaluated through OPA).
func BenchmarkDecide1000Patterns(b *testing.B) {
	src, ins := patternPolicy1000()
	e := NewEngine(WithCacheSize(0))
	if _, err := e.Load("patterns.yaml", src); err != nil {
		b.Fatal(err)
	}
	for _, in := range ins[:3] {
		if d := e.DecideNetwork(context.Background(), in); !d.Allow {
			b.Fatalf("%s: %s", in.Host, d.Message)
		}
	}
	benchDecide(b, e, ins)
}
