package harness

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/bench/loadgen"
	"github.com/stockade-dev/stockade/internal/testenv"
)

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tstockade\nVmPeak:\t 1300000 kB\nVmRSS:\t   43808 kB\nRssAnon:\t   20000 kB\n"
	if n, err := parseVmRSS([]byte(status)); err != nil || n != 43808<<10 {
		t.Fatalf("VmRSS = %d, %v; want %d", n, err, 43808<<10)
	}
	for _, bad := range []string{"Name:\tkthreadd\n", "VmRSS:\t 12 MB\n", "VmRSS:\t x kB\n", "VmRSS:\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestParseAnonymous(t *testing.T) {
	rollup := "55bd1621d000-7fffec022000 ---p 00000000 00:00 0    [rollup]\nRss:    1620 kB\nPss_Anon:   112 kB\nAnonymous:   9216 kB\nKSM:   0 kB\n"
	if n, err := parseKB([]byte(rollup), "Anonymous:"); err != nil || n != 9216<<10 {
		t.Fatalf("Anonymous = %d, %v; want %d", n, err, 9216<<10)
	}
	for _, bad := range []string{"Rss:   1620 kB\n", "Anonymous:   9 MB\n", "Anonymous:\n"} {
		if _, err := parseKB([]byte(bad), "Anonymous:"); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	a, err := procAnon(os.Getpid())
	if err != nil || a <= 0 {
		t.Fatalf("own anonymous memory = %d, %v; want some", a, err)
	}
	if rss, _ := procRSS(os.Getpid()); a > rss {
		t.Errorf("own anonymous memory %d is more than the RSS %d", a, rss)
	}
}

// TestProcRSS reads this test process: it has a resident set and open
// files, and a pid that does not exist is an error.
func TestProcRSS(t *testing.T) {
	n, err := procRSS(os.Getpid())
	if err != nil || n < 1<<20 {
		t.Fatalf("own RSS = %d, %v; want at least 1 MiB", n, err)
	}
	fds, err := procFDs(os.Getpid())
	if err != nil || fds < 3 {
		t.Fatalf("own fds = %d, %v", fds, err)
	}
	if _, err := procRSS(1 << 30); err == nil {
		t.Fatal("no such process: want an error")
	}
}

func TestParseStatTicks(t *testing.T) {
	// pid (comm with ") x") state ppid ... utime=7 stime=5 cutime=100 cstime=50 ...
	stat := "42 (a ) b) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 100 50 20 0 9 0 1234 5678 99\n"
	if u, s, err := parseStatTicks([]byte(stat), false); err != nil || u != 7 || s != 5 {
		t.Fatalf("own ticks = user %d sys %d, %v; want 7 and 5", u, s, err)
	}
	if u, s, err := parseStatTicks([]byte(stat), true); err != nil || u != 107 || s != 55 {
		t.Fatalf("ticks with children = user %d sys %d, %v; want 107 and 55", u, s, err)
	}
	if _, _, err := parseStatTicks([]byte("42 (x S 1"), false); err == nil {
		t.Fatal("malformed stat: want an error")
	}
}

func TestFmtBytes(t *testing.T) {
	for n, want := range map[float64]string{512: "0.5 KiB", 3 << 20: "3.0 MiB", 45 << 10: "45.0 KiB", -(2 << 20): "-2.0 MiB"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%v) = %q, want %q", n, got, want)
		}
	}
}

func TestHoldPhases(t *testing.T) {
	var final loadgen.HoldResult
	var atHeld []loadgen.HoldResult
	p := &holdPhases{held: func(r loadgen.HoldResult) { atHeld = append(atHeld, r) }, final: &final}
	if err := p.complete(); err == nil {
		t.Fatal("no lines: want incomplete")
	}
	if err := p.line([]byte(`{"phase":"done","established":3}`)); err == nil {
		t.Fatal("done before held: want an error")
	}
	if err := p.line([]byte(`{"phase":"held","requested":3,"established":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.line([]byte(`{"phase":"held"}`)); err == nil {
		t.Fatal("a second held: want an error")
	}
	if err := p.line([]byte(`{"phase":"done","requested":3,"established":3,"alive":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := p.complete(); err != nil {
		t.Fatal(err)
	}
	if len(atHeld) != 1 || atHeld[0].Established != 3 || final.Alive != 2 {
		t.Fatalf("held %+v, final %+v", atHeld, final)
	}
	if err := (&holdPhases{final: &final}).line([]byte("not json")); err == nil {
		t.Fatal("not JSON: want an error")
	}
}

// TestStreamCmd: lines arrive while the command still runs (the second is
// printed only after the first was handled), an onLine error stops the
// command at once, and a failing command's stderr is in the error.
func TestStreamCmd(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	dir := t.TempDir()
	flag := dir + "/handled"
	script := `echo one; while [ ! -e ` + flag + ` ]; do sleep 0.01; done; echo two`
	var lines []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := streamCmd(ctx, dir, sh, []string{"-c", script}, func(b []byte) error {
		lines = append(lines, string(b))
		return os.WriteFile(flag, nil, 0o644)
	})
	if err != nil || strings.Join(lines, ",") != "one,two" {
		t.Fatalf("lines %q, err %v", lines, err)
	}
	start := time.Now()
	err = streamCmd(ctx, dir, sh, []string{"-c", "echo x; exec sleep 30"}, func([]byte) error { return os.ErrInvalid })
	if err != os.ErrInvalid || time.Since(start) > 5*time.Second {
		t.Fatalf("onLine error: got %v after %s", err, time.Since(start))
	}
	err = streamCmd(ctx, dir, sh, []string{"-c", "echo oops >&2; exit 3"}, func([]byte) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "oops") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("failing command: %v", err)
	}
}

func TestPerTunnel(t *testing.T) {
	r := &rssResult{idle: 10 << 20, held: 30 << 20, hold: loadgen.HoldResult{Established: 1000}, haveHold: true}
	if per, ok := r.perTunnel(); !ok || per != float64(20<<20)/1000 {
		t.Fatalf("per tunnel = %v %v", per, ok)
	}
	r.hold.Established = 0
	if _, ok := r.perTunnel(); ok {
		t.Fatal("no tunnels open: no per-tunnel figure")
	}
	if _, ok := (*rssResult)(nil).perTunnel(); ok {
		t.Fatal("nil result: no per-tunnel figure")
	}
}
