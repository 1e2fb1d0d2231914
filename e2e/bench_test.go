package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// BenchmarkWorkloadSyscalls: a tight getpid loop (2,000,000 calls) in a
// sandbox (namespaces, Landlock, the seccomp filter, its cgroup) against
// the same binary on the host, in turns; reports ns per call of each and
// their ratio.
func BenchmarkWorkloadSyscalls(b *testing.B) {
	w := newWorld(b, 0)
	probe := filepath.Join(b.TempDir(), "probe")
	if out, err := exec.Command("go", "build", "-o", probe, "./testdata/probe").CombinedOutput(); err != nil {
		b.Fatalf("build the probe: %v\n%s", err, out)
	}
	s := w.create("bench", "exec sleep 1000")
	bin, err := os.ReadFile(probe)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Workspace, "probe"), bin, 0o755); err != nil {
		b.Fatal(err)
	}
	re := regexp.MustCompile(`getpid ns=([0-9.]+)`)
	perCall := func(out string) float64 {
		m := re.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("probe said %q", out)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var host, sandbox float64
	b.ResetTimer()
	for range b.N {
		out, err := exec.Command(probe, "getpid", "2000000").Output()
		if err != nil {
			b.Fatal(err)
		}
		host += perCall(string(out))
		o, errOut, code := w.cli("exec", "bench", "--", "/sandbox/probe", "getpid", "2000000")
		if code != 0 {
			b.Fatalf("exec: %d %s", code, errOut)
		}
		sandbox += perCall(o)
	}
	n := float64(b.N)
	b.ReportMetric(host/n, "host-ns/call")
	b.ReportMetric(sandbox/n, "sandbox-ns/call")
	b.ReportMetric(sandbox/host, "x-sandbox/host")
}
