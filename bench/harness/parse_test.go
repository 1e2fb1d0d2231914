package harness

import (
	"strings"
	"testing"
)

// dnsperfOutput is real dnsperf 2.10.0 output against dnsmasq 2.90.
const dnsperfOutput = `DNS Performance Testing Tool
Version 2.10.0

[Status] Command line: dnsperf -s 127.0.0.1 -p 15355 -d /tmp/q.txt -l 5 -c 4 -T 1 -q 100
[Status] Sending queries (to 127.0.0.1:15355)
[Status] Started at: Sun Nov 29 21:48:25 2026
[Status] Stopping after 5.000000 seconds
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         762335
  Queries completed:    762335 (100.00%)
  Queries lost:         0 (0.00%)

  Response codes:       NOERROR 381168 (50.00%), REFUSED 381167 (50.00%)
  Average packet size:  request 32, response 40
  Run time (s):         5.000288
  Queries per second:   152458.218407

  Average Latency (s):  0.000568 (min 0.000010, max 0.036432)
  Latency StdDev (s):   0.000493
`

func TestParseDNSPerf(t *testing.T) {
	r, err := parseDNSPerf([]byte(dnsperfOutput))
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 762335 || r.Completed != 762335 || r.Lost != 0 || r.QPS != 152458.218407 {
		t.Fatalf("counts: %+v", r)
	}
	if r.Rcodes["NOERROR"] != 381168 || r.Rcodes["REFUSED"] != 381167 || len(r.Rcodes) != 2 {
		t.Fatalf("rcodes: %v", r.Rcodes)
	}
	if !r.splitExact() {
		t.Fatal("the real dnsmasq split must be exact")
	}
	if _, err := parseDNSPerf([]byte(strings.Replace(dnsperfOutput, "Queries lost", "Queries gone", 1))); err == nil {
		t.Fatal("output without a lost line must fail")
	}
	if _, err := parseDNSPerf([]byte(strings.Replace(dnsperfOutput, "NOERROR 381168", "NOERROR x", 1))); err == nil {
		t.Fatal("malformed response codes must fail")
	}
}

func TestSplitExact(t *testing.T) {
	for _, c := range []struct {
		name string
		r    dnsResult
		want bool
	}{
		{"odd sent", dnsResult{Sent: 5, Completed: 5, Rcodes: map[string]int64{"NOERROR": 3, "REFUSED": 2}}, true},
		{"even sent", dnsResult{Sent: 4, Completed: 4, Rcodes: map[string]int64{"NOERROR": 2, "REFUSED": 2}}, true},
		{"swapped", dnsResult{Sent: 5, Completed: 5, Rcodes: map[string]int64{"NOERROR": 2, "REFUSED": 3}}, false},
		{"servfail", dnsResult{Sent: 4, Completed: 4, Rcodes: map[string]int64{"NOERROR": 2, "REFUSED": 1, "SERVFAIL": 1}}, false},
		{"lost", dnsResult{Sent: 5, Completed: 4, Lost: 1, Rcodes: map[string]int64{"NOERROR": 2, "REFUSED": 2}}, false},
		{"all refused", dnsResult{Sent: 4, Completed: 4, Rcodes: map[string]int64{"REFUSED": 4}}, false},
	} {
		if got := c.r.splitExact(); got != c.want {
			t.Errorf("%s: splitExact = %v, want %v", c.name, got, c.want)
		}
	}
}

const goBenchOutput = `goos: linux
goarch: amd64
pkg: github.com/stockade-dev/stockade/boundary/identity
cpu: AMD EPYC
BenchmarkSocketStep/sockets=200/sock_diag-2         	  436282	      2512 ns/op	       409.0 host-tcp	      1500 p50-ns	      4900 p99-ns	     120 B/op	       3 allocs/op
BenchmarkSocketStep/sockets=200/sock_diag-2         	  436282	      2600 ns/op	       409.0 host-tcp	      1500 p50-ns	      5300 p99-ns	     120 B/op	       3 allocs/op
BenchmarkSocketStep/sockets=200/sock_diag-2         	  436282	      2400 ns/op	       409.0 host-tcp	      1500 p50-ns	     40000 p99-ns	     120 B/op	       3 allocs/op
BenchmarkSocketStep/sockets=200/proc_net_tcp-2      	      10	 123220000 ns/op	  34120000 p99-ns
BenchmarkPlain   	 1000000	      1042 ns/op
PASS
ok  	github.com/stockade-dev/stockade/boundary/identity	12.1s
`

func TestParseGoBench(t *testing.T) {
	got := parseGoBench([]byte(goBenchOutput))
	if len(got) != 3 {
		t.Fatalf("want 3 benchmarks, got %d", len(got))
	}
	b := got[0]
	if b.Name != "BenchmarkSocketStep/sockets=200/sock_diag" {
		t.Fatalf("name %q", b.Name)
	}
	if want := []string{"ns/op", "host-tcp", "p50-ns", "p99-ns", "B/op", "allocs/op"}; strings.Join(b.Units, ",") != strings.Join(want, ",") {
		t.Fatalf("units %v, want %v", b.Units, want)
	}
	if p99, ok := b.p99Ns(); !ok || p99 != 5300 {
		t.Fatalf("median p99 = %v %v, want 5300", p99, ok)
	}
	if got[2].Name != "BenchmarkPlain" || median(got[2].Values["ns/op"]) != 1042 {
		t.Fatalf("plain benchmark: %+v", got[2])
	}
	if _, ok := got[2].p99Ns(); ok {
		t.Fatal("a benchmark without a p99 metric must say so")
	}
}

func TestBenchTarget(t *testing.T) {
	for _, c := range []struct {
		pkg, name string
		want      float64
	}{
		{"./policy/", "BenchmarkDecide1000Endpoints", 20e3},
		{"./policy/", "BenchmarkDecide1000EndpointsCached", 1e3},
		{"./policy/", "BenchmarkDecide1000EndpointsUncached", 20e3},
		{"./policy/", "BenchmarkParse", 0},
		{"./policy/", "BenchmarkDecide10Endpoints", 0},
		{"./policy/", "BenchmarkDecide10000Endpoints", 0},
		{"./policy/", "BenchmarkDecide/endpoints=1000/cache=on", 1e3},
		{"./policy/", "BenchmarkDecide/endpoints=1000/cache=off", 20e3},
		{"./policy/", "BenchmarkDecide/1000/warm", 1e3},
		{"./policy/", "BenchmarkDecide/1000/cold", 20e3},
		{"./policy/", "BenchmarkDecide1000EndpointsPermissive", 20e3},
		{"./boundary/identity/", "BenchmarkSocketStep/sockets=18000/sock_diag", 10e3},
		{"./boundary/identity/", "BenchmarkSocketStep/sockets=2000/proc_net_tcp", 0},
		{"./boundary/identity/", "BenchmarkWholeLookup/chain=50/warm", 0},
	} {
		if got, _ := benchTarget(c.pkg, c.name); got != c.want {
			t.Errorf("%s %s: target %v, want %v", c.pkg, c.name, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	if median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 3, 2}) != 2.5 || median(nil) != 0 {
		t.Fatal("median")
	}
}

func TestRender(t *testing.T) {
	r := &Report{
		Header: []string{"head"},
		Rows: []Row{
			{Name: "tunnels/s", Stockade: "100", Peer: "50 tinyproxy", Ratio: "2.00x", Target: ">= 1.3x", Verdict: Pass},
			{Name: "p99 µs", Stockade: "9.1µs", Verdict: Miss},
			{Name: "info"},
		},
		Notes: []string{"a note"},
	}
	var b strings.Builder
	if err := r.Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var width int
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		n := len([]rune(line))
		if width == 0 {
			width = n
		}
		if n != width {
			t.Fatalf("misaligned table line %q (%d runes, want %d)\n%s", line, n, width, out)
		}
	}
	for _, want := range []string{"head\n", "| pass ", "| MISS ", "- a note"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if r.Misses() != 1 {
		t.Fatalf("misses = %d, want 1", r.Misses())
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{Info: "-", Pass: "pass", Miss: "MISS", NotRun: "n/a", Verdict(9): "Verdict(9)"} {
		if v.String() != want {
			t.Errorf("%d: %q, want %q", int(v), v.String(), want)
		}
	}
}

func TestDurationUnit(t *testing.T) {
	for _, c := range []struct {
		unit, label string
		scale       float64
		ok          bool
	}{
		{"p99-ns", "p99", 1, true},
		{"p50_us", "p50", 1e3, true},
		{"p99-µs/op", "p99", 1e3, true},
		{"p99.ms", "p99", 1e6, true},
		{"p99-s", "p99", 1e9, true},
		{"ns/op", "", 0, false},
		{"host-tcp", "", 0, false},
		{"allocs/op", "", 0, false},
		{"-ns", "", 0, false},
	} {
		label, scale, ok := durationUnit(c.unit)
		if label != c.label || scale != c.scale || ok != c.ok {
			t.Errorf("%q: %q %v %v, want %q %v %v", c.unit, label, scale, ok, c.label, c.scale, c.ok)
		}
	}
	// A p99 metric reported in µs per op is judged in ns.
	b := parseGoBench([]byte("BenchmarkDecide1000Endpoints-2  100  25000 ns/op  12.5 p99-us/op\n"))
	if len(b) != 1 {
		t.Fatalf("parsed %d benchmarks", len(b))
	}
	if p99, ok := b[0].p99Ns(); !ok || p99 != 12500 {
		t.Fatalf("p99 = %v %v, want 12500 ns", p99, ok)
	}
}

func TestHasNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"decide1000endpoints": true, "decide/endpoints=1000": true, "1000": true,
		"decide10000endpoints": false, "decide11000": false, "decide100": false,
	} {
		if hasNumber(s, "1000") != want {
			t.Errorf("hasNumber(%q, 1000) = %v, want %v", s, !want, want)
		}
	}
}
