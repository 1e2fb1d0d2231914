package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
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

// BenchmarkContainmentCost: create -> Ready and one exec round trip with
// the seccomp filter and the cgroup (as sandboxes run) and without them (a
// gateway run --bench-unconfined), in turns; reports each and the ratios.
func BenchmarkContainmentCost(b *testing.B) {
	confined, unconfined := newWorld(b, 0), newWorld(b, 0, "--bench-unconfined")
	type cost struct{ create, exec time.Duration }
	measure := func(w *world, name string) cost {
		t0 := time.Now()
		if out, errOut, code := w.cli("create", name, "--policy", w.policy, "--", "/bin/sh", "-c", "exec sleep 1000"); code != 0 {
			b.Fatalf("create: %d %s %s", code, out, errOut)
		}
		t1 := time.Now()
		if out, errOut, code := w.cli("exec", name, "--", "/bin/true"); code != 0 {
			b.Fatalf("exec: %d %s %s", code, out, errOut)
		}
		c := cost{create: t1.Sub(t0), exec: time.Since(t1)}
		if _, errOut, code := w.cli("delete", name); code != 0 {
			b.Fatalf("delete: %d %s", code, errOut)
		}
		return c
	}
	var on, off cost
	b.ResetTimer()
	for i := range b.N {
		name := "cost-" + strconv.Itoa(i)
		c := measure(confined, name)
		u := measure(unconfined, name)
		on.create, on.exec = on.create+c.create, on.exec+c.exec
		off.create, off.exec = off.create+u.create, off.exec+u.exec
	}
	n := time.Duration(b.N)
	b.ReportMetric(float64((on.create / n).Nanoseconds()), "confined-create-ns")
	b.ReportMetric(float64((off.create / n).Nanoseconds()), "unconfined-create-ns")
	b.ReportMetric(float64(on.create)/float64(off.create), "x-create")
	b.ReportMetric(float64((on.exec / n).Nanoseconds()), "confined-exec-ns")
	b.ReportMetric(float64((off.exec / n).Nanoseconds()), "unconfined-exec-ns")
	b.ReportMetric(float64(on.exec)/float64(off.exec), "x-exec")
}
