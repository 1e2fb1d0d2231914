package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// logUse is `get -o json`'s view of the workload log.
type logUse struct {
	Phase     string `json:"phase"`
	Resources struct {
		LogLimit       int64 `json:"logLimitBytes"`
		LogLinesPerSec int64 `json:"logLinesPerSec"`
		LogBurst       int64 `json:"logBurst"`
		LogBytes       int64 `json:"logBytes"`
		LogDropped     int64 `json:"logDroppedLines"`
	} `json:"resources"`
}

func (w *world) logUse(t *testing.T, name string) logUse {
	t.Helper()
	out, errOut, code := w.cli("get", name, "-o", "json")
	var u logUse
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil {
		t.Fatalf("get %s: exit %d %s%s", name, code, out, errOut)
	}
	return u
}

// logFiles is the sizes of workload.log and its rotated files of
// sandbox name, and their sum.
func logFiles(t *testing.T, w *world, name string) (map[string]int64, int64) {
	t.Helper()
	ps, _ := filepath.Glob(sandboxLog(w.state, name, contract.WorkloadLog) + "*")
	sizes, total := map[string]int64{}, int64(0)
	for _, p := range ps {
		if st, err := os.Stat(p); err == nil { // a rotation may remove one meanwhile
			sizes[filepath.Base(p)] = st.Size()
			total += st.Size()
		}
	}
	return sizes, total
}

// procStat is the fields of /proc/PID/stat after the command's name
// (the state is the first).
func procStat(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
}

// cpuTicks is the user and system CPU time of process pid, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	f := procStat(t, pid)
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// groupCPU is the CPU time charged to sandbox name's cgroup so far
// (cpuacct.usage on cgroup v1, cpu.stat's usage_usec on v2).
func groupCPU(t *testing.T, w *world, name string) time.Duration {
	t.Helper()
	g := cgroup.SandboxGroup(name, testenv.Path(t)(contract.StateDir(w.state).Sandbox(name)))
	dirs, err := cgroup.Find(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				t.Fatalf("%s/cpuacct.usage: %v", d, err)
			}
			return time.Duration(ns)
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.stat")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					if err != nil {
						t.Fatalf("%s/cpu.stat: %v", d, err)
					}
					return time.Duration(us) * time.Microsecond
				}
			}
		}
	}
	t.Fatalf("sandbox %s: no cpu accounting in its cgroup %s (%v)", name, g, dirs)
	return 0
}

// peakMemory is VmHWM of process pid ("12345 kB").
func peakMemory(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, v, _ := strings.Cut(string(b), "VmHWM:")
	v, _, _ = strings.Cut(v, "\n")
	return strings.TrimSpace(v)
}

// parentOf is the parent pid of process pid.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	ppid, err := strconv.Atoi(procStat(t, pid)[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

var markerLine = regexp.MustCompile(`stockade: (\d+) lines of output dropped in [0-9.]+m?s: `)

// TestLogFloodStaysBounded: a workload runs `yes` for 10 s in a sandbox
// whose log is capped at 256 KiB (the line rate and burst the defaults:
// 1,000 lines/s, 10,000 at once) and whose CPU is capped at half a CPU.
// The flood is paid for by the sandbox: the supervisor (outside the
// sandbox's cgroup) spends under 15% of a CPU over it, while the
// sandbox's cgroup is charged the flood's CPU (its init reads, counts
// and drops the lines), held to about half a CPU. Throughout, workload.log and its rotated
// files stay under the cap, each under its quarter; `get -o json` shows
// the log's bytes (those on disk) and the lines dropped; `sandbox logs`
// shows the markers with their counts and the output after the flood
// (printed 2 s after it: the pipe's last lines use up the line rate's
// room, and a line printed at once would be dropped with them); a
// `logs -f` started before the flood follows it across the rotations to
// its end; the sandbox stays Ready, and exec and the boundary work during
// the flood. Then a workload with no line rate but --io-bps 256K: the log
// is written at that rate, and the markers say so.
func TestLogFloodStaysBounded(t *testing.T) {
	w := newWorld(t, 0)
	eve := newElsewhere(t, w)
	const capBytes = 256 << 10
	s := w.create("flood", `echo before-flood; sleep 1; timeout 10 yes; sleep 2; echo after-flood; echo done > /sandbox/flood-done; exec sleep 1000`,
		"--log-size", "256K", "--cpus", "0.5")
	f := eve.follow("flood", "-f")
	f.waitLine(t, "out: before-flood", 15*time.Second)
	if u := w.logUse(t, "flood"); u.Resources.LogLimit != capBytes || u.Resources.LogLinesPerSec != 1000 || u.Resources.LogBurst != 10000 {
		t.Fatalf("get's log limits %+v, want 256 KiB, 1000 lines/s, burst 10000", u.Resources)
	}
	st, _ := w.get("flood")
	initPid := parentOf(t, st.WorkloadPid)
	initPeak0 := peakMemory(t, initPid)
	cpu0, init0, group0, t0 := cpuTicks(t, st.SupervisorPid), cpuTicks(t, initPid), groupCPU(t, w, "flood"), time.Now()

	// During the flood: the cap holds, exec and the boundary answer.
	var samples, worked int
	var maxTotal int64
	done := filepath.Join(s.Workspace, "flood-done")
	for deadline := time.Now().Add(40 * time.Second); ; samples++ {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood did not end within 40 s")
		}
		sizes, total := logFiles(t, w, "flood")
		if total > capBytes {
			t.Fatalf("workload.log and its rotated files take %d bytes, over the cap %d: %v", total, capBytes, sizes)
		}
		for name, n := range sizes {
			if n > capBytes/4 {
				t.Fatalf("%s takes %d bytes, over its quarter of the cap: %v", name, n, sizes)
			}
		}
		maxTotal = max(maxTotal, total)
		if samples%10 == 0 {
			out, errOut, code := w.execIn("flood", fmt.Sprintf(`curl -sS -m 10 http://api.test:%d/x`, w.webPort))
			if code != 0 || !strings.Contains(out, "upstream says hi to api.test") {
				t.Fatalf("exec and the boundary during the flood: exit %d %q %q", code, out, errOut)
			}
			worked++
		}
		time.Sleep(100 * time.Millisecond)
	}
	cpu := time.Duration(cpuTicks(t, st.SupervisorPid)-cpu0) * 10 * time.Millisecond
	initCPU := time.Duration(cpuTicks(t, initPid)-init0) * 10 * time.Millisecond
	groupUse, elapsed := groupCPU(t, w, "flood")-group0, time.Since(t0)
	sizes, total := logFiles(t, w, "flood")
	t.Logf("%d samples of the log during the flood, at most %d bytes; %d execs with curl; now %v; in %s: supervisor CPU %s (%.0f%% of a CPU), sandbox's cgroup %s (%.0f%%), its init %s (peak memory %s, %s before the flood)",
		samples, maxTotal, worked, sizes, elapsed.Round(time.Millisecond), cpu, 100*cpu.Seconds()/elapsed.Seconds(),
		groupUse.Round(time.Millisecond), 100*groupUse.Seconds()/elapsed.Seconds(), initCPU, peakMemory(t, initPid), initPeak0)
	// Who paid: the supervisor's share small, the flood charged to the
	// sandbox (ten seconds at up to half a CPU, the quota in 100 ms
	// periods: a period's worth of slack), within its --cpus.
	if cpu.Seconds() > 0.15*elapsed.Seconds() {
		t.Errorf("the supervisor spent %s of CPU in %s of flood, over 15%% of a CPU: the flood is not paid for by the sandbox", cpu, elapsed.Round(time.Millisecond))
	}
	if groupUse < 2*time.Second || groupUse.Seconds() > 0.5*elapsed.Seconds()+0.2 {
		t.Errorf("the sandbox's cgroup was charged %s of CPU in %s: want the flood's (at least 2 s) and at most half a CPU (--cpus 0.5)", groupUse, elapsed.Round(time.Millisecond))
	}
	if _, ok := sizes["workload.log.3"]; !ok || worked < 2 || total > capBytes {
		t.Fatalf("after the flood: files %v (want three rotated ones, under %d bytes); %d execs during it", sizes, capBytes, worked)
	}

	// get: the bytes on disk and the lines dropped (the next heartbeats).
	var u logUse
	testenv.Eventually(t, 30*time.Second, func() bool {
		u = w.logUse(t, "flood")
		_, total = logFiles(t, w, "flood")
		return u.Resources.LogBytes == total && u.Resources.LogDropped > 1_000_000
	}, "get to show the log's bytes on disk (%d) and over a million lines dropped (got %+v)", &total, &u)
	if u.Phase != "Ready" {
		t.Fatalf("after the flood: %s", u.Phase)
	}

	// logs: the markers with their counts (the oldest rotated away), and
	// the output after the flood.
	out, _, code := eve.run("logs", "flood")
	ms := markerLine.FindAllStringSubmatch(out, -1)
	var shown int64
	for _, m := range ms {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		shown += n
	}
	if code != 0 || len(ms) < 2 || shown <= 0 || shown > u.Resources.LogDropped ||
		!strings.Contains(out, "over the line rate (1000 lines/s, burst 10000)") || !strings.Contains(out, "out: after-flood") {
		t.Fatalf("logs (exit %d): %d markers counting %d (of %d dropped), want some, the reason, and after-flood:\n%s",
			code, len(ms), shown, u.Resources.LogDropped, tailOf(out, 20))
	}
	t.Logf("logs shows %d markers counting %d of the %d lines dropped; e.g. %q", len(ms), shown, u.Resources.LogDropped, ms[len(ms)-1][0])

	// The follow went across every rotation to the end, in order.
	f.waitLine(t, "out: after-flood", 30*time.Second)
	got := f.lines()
	if indexOf(got, "stockade: ") < 0 || indexOf(got, "out: before-flood") > indexOf(got, "out: after-flood") {
		t.Fatalf("logs -f: no marker, or out of order (%d lines)", len(got))
	}
	var ys int
	for _, l := range got {
		if strings.HasSuffix(l, " out: y") {
			ys++
		}
	}
	if ys < 10_000 || ys > 30_000 {
		t.Fatalf("logs -f saw %d lines of y: want the burst and about 1,000 a second for 10 s", ys)
	}
	t.Logf("logs -f saw %d lines, %d of them y", len(got), ys)

	// A firehose with no line rate but --io-bps 256K: written at that
	// rate, dropped over it (by init: the supervisor's CPU stays small
	// here too), still under the cap.
	w.create("hose", `sleep 1; timeout 5 yes; echo done > /sandbox/hose-done; exec sleep 1000`, "--log-size", "256K", "--log-rate", "-1", "--io-bps", "256K")
	hs, _ := w.get("hose")
	cpu0, t0 = cpuTicks(t, hs.SupervisorPid), time.Now()
	w.fileWithin(hs, "hose-done", 40*time.Second)
	cpu, elapsed = time.Duration(cpuTicks(t, hs.SupervisorPid)-cpu0)*10*time.Millisecond, time.Since(t0)
	t.Logf("hose: supervisor CPU %s in %s", cpu, elapsed.Round(time.Millisecond))
	if cpu.Seconds() > 0.15*elapsed.Seconds() {
		t.Errorf("the supervisor spent %s of CPU in %s of a flood at --io-bps 256K, over 15%% of a CPU", cpu, elapsed.Round(time.Millisecond))
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		out, _, _ = eve.run("logs", "hose")
		return strings.Contains(out, "over the write rate (256 KiB/s, the sandbox's io-bps)")
	}, "a marker for the write rate")
	if sizes, total := logFiles(t, w, "hose"); total > capBytes {
		t.Fatalf("hose's log: %v, over the cap", sizes)
	}
	if strings.Contains(out, "over the line rate") {
		t.Fatalf("a line-rate drop with --log-rate -1:\n%s", tailOf(out, 10))
	}
}

// tailOf is the last n lines of s.
func tailOf(s string, n int) string {
	ls := lines(s)
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
