package policy

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestScratchCPU(t *testing.T) {
	if os.Getenv("SCRATCH") == "" {
		t.Skip()
	}
	ctx := context.Background()
	store := inmem.NewFromASTObject(ast.NewObject())
	pq, err := rego.New(rego.Query("data.t.p"), rego.Module("t.rego", "package t\np := input.a"), rego.Store(store)).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := ast.NewObject(ast.Item(ast.StringTerm("a"), ast.StringTerm("x")))
	const n = 20000
	c0 := cpuNow()
	for i := 0; i < n; i++ {
		pq.Eval(ctx, rego.EvalParsedInput(in), rego.EvalGenerateJSON(keepAST))
	}
	t.Logf("floor: %v CPU/op", (cpuNow()-c0)/n)
	pol, err := Parse("s.yaml", syntheticPolicy(1000))
	if err != nil {
		t.Fatal(err)
	}
	for _, variant := range []string{"", os.Getenv("SCRATCH")} {
		mod, _ := parseModule()
		if variant != "" && variant != "1" {
			src, _ := os.ReadFile(variant)
			mod, err = ast.ParseModuleWithOpts("v.rego", string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
			if err != nil {
				t.Fatal(err)
			}
		}
		c, err := compile(ctx, mod, pol)
		if err != nil {
			t.Fatal(err)
		}
		s := &snapshot{version: 1, policy: pol, compiled: c, cache: newDecisionCache(0)}
		ins := syntheticInputs(1000)
		for k := 0; k < 4; k++ {
			var d Decision
			c0 = cpuNow()
			for i := 0; i < n; i++ {
				if i%4 == k {
					in := ins[i%len(ins)]
					in.Host = normalizeName(in.Host)
					d, err = s.evalNetwork(ctx, in)
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Logf("%s kind %d: %v CPU/op %s %s", variant, k, (cpuNow()-c0)/(n/4), d.Reason, d.Policy)
		}
	}
}

func BenchmarkScratchFloor(b *testing.B) {
	ctx := context.Background()
	store := inmem.NewFromASTObject(ast.NewObject())
	pq, err := rego.New(rego.Query("data.t.p"), rego.Module("t.rego", "package t\np := input.a"), rego.Store(store)).PrepareForEval(ctx)
	if err != nil {
		b.Fatal(err)
	}
	in := ast.NewObject(ast.Item(ast.StringTerm("a"), ast.StringTerm("x")))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pq.Eval(ctx, rego.EvalParsedInput(in), rego.EvalGenerateJSON(keepAST))
	}
}
