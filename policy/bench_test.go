package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// the p50 and p99 latency next to ns/op. It uses b.Loop, so the caller's
// setup (loading the policy) runs once.
func benchDecide(b *testing.B, e *Engine, ins []NetworkInput) {
	ctx := context.Background()
	for _, in := range ins { // warm the cache (a no-op without one)
		e.DecideNetwork(ctx, in)
	}
	var lat latencies
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		d := e.DecideNetwork(ctx, ins[i%len(ins)])
		lat.add(time.Since(t0))
		if d.Version == 0 {
			b.Fatal(d.Message)
		}
	}
	lat.report(b)
}

// latencies records per-operation latencies without allocating per
// sample (a slice of every sample would be tens of MB and its growth
// would feed the garbage collector during the measurement): a histogram
// of 1 ns buckets up to 100 µs, and the rarer longer samples as they are.
type latencies struct {
	buckets []uint32 // allocated on the first sample
	long    []time.Duration
	n       int
}

const latencyBuckets = 100_000 // ns

func (l *latencies) add(d time.Duration) {
	if l.buckets == nil {
		l.buckets = make([]uint32, latencyBuckets)
	}
	l.n++
	if ns := d.Nanoseconds(); ns >= 0 && ns < latencyBuckets {
		l.buckets[ns]++
		return
	}
	l.long = append(l.long, d)
}

// quantile returns the latency below which a fraction q of samples lie
// (the sample at index n*q of the sorted samples).
func (l *latencies) quantile(q float64) time.Duration {
	rank := int(float64(l.n) * q)
	for ns, c := range l.buckets {
		if rank < int(c) {
			return time.Duration(ns)
		}
		rank -= int(c)
	}
	slices.Sort(l.long)
	return l.long[min(rank, len(l.long)-1)]
}

// report reports the p50 and p99 next to ns/op.
func (l *latencies) report(b *testing.B) {
	if l.n == 0 {
		return
	}
	b.ReportMetric(float64(l.quantile(0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(l.quantile(0.99).Nanoseconds()), "p99-ns")
}

func BenchmarkDecide10Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 10, WithCacheSize(0))
	benchDecide(b, e, ins)
}

func BenchmarkDecide1000Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 1000, WithCacheSize(0))
	benchDecide(b, e, ins)
}

// BenchmarkOPAOnly10Endpoints and BenchmarkOPAOnly1000Endpoints are the
// uncached decisions of BenchmarkDecide10Endpoints and
// BenchmarkDecide1000Endpoints with OPA answering alone (no decision
// index): what the index saves. The names stay clear of the harness's
// targets (they are the reference, not the product).
func BenchmarkOPAOnly10Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 10, WithCacheSize(0), withoutIndex())
	benchDecide(b, e, ins)
}

func BenchmarkOPAOnly1000Endpoints(b *testing.B) {
	e, ins := benchEngine(b, 1000, WithCacheSize(0), withoutIndex())
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
	var lat latencies
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		rs, err := pq.Eval(ctx, rego.EvalParsedInput(in), rego.EvalGenerateJSON(keepAST),
			rego.EvalMetrics(metrics.NoOp()), rego.EvalExternalCancel(s.noCancel))
		lat.add(time.Since(t0))
		if err != nil || len(rs) != 1 {
			b.Fatal(err)
		}
	}
	lat.report(b)
}

// patternPolicyN is a policy of n endpoints in OpenShell's pattern shapes
// (partial first label, middle label, any depth) and one host-less
// allowed_ips endpoint on its own port, with inputs that each match one
// pattern.
func patternPolicyN(n int) ([]byte, []NetworkInput) {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	var ins []NetworkInput
	for i := 0; i < n; i++ {
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
// endpoints (the per-version pattern index, reached by the decision index;
// loading the policy takes seconds: the ambiguity check is pairwise).
func BenchmarkDecide1000Patterns(b *testing.B) {
	src, ins := patternPolicyN(1000)
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

// TestLatencyQuantiles: the benchmarks' histogram gives the quantiles of
// sorting every sample, long samples included.
func TestLatencyQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 99, 100, 1000, 12345} {
		var l latencies
		all := make([]time.Duration, n)
		for i := range all {
			all[i] = time.Duration(r.IntN(300_000)) // a third beyond the buckets
			if r.IntN(2) == 0 {
				all[i] = time.Duration(r.IntN(500))
			}
			l.add(all[i])
		}
		slices.Sort(all)
		for _, q := range []float64{0, 0.5, 0.99} {
			if got, want := l.quantile(q), all[int(float64(n)*q)]; got != want {
				t.Errorf("n=%d q=%v: %v, want %v", n, q, got, want)
			}
		}
	}
}
