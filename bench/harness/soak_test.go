package harness

import (
	"strings"
	"testing"
	"time"
)

// samplesEvery makes samples every step over d, the RSS given by f.
func samplesEvery(d, step time.Duration, f func(at time.Duration) int64) []RSSSample {
	var out []RSSSample
	for at := time.Duration(0); at <= d; at += step {
		out = append(out, RSSSample{At: at, RSS: f(at), FDs: 10})
	}
	return out
}

func TestSoakWindows(t *testing.T) {
	for _, c := range []struct{ d, warmup, window time.Duration }{
		{10 * time.Minute, time.Minute, time.Minute},
		{time.Minute, 10 * time.Second, 15 * time.Second},
		{time.Hour, time.Minute, time.Minute},
	} {
		if w, win := soakWindows(c.d); w != c.warmup || win != c.window {
			t.Errorf("%s: warm-up %s window %s, want %s %s", c.d, w, win, c.warmup, c.window)
		}
	}
}

func TestJudgeGrowth(t *testing.T) {
	const mib = 1 << 20
	d := 10 * time.Minute
	// A warm-up spike, then flat: passes; the spike is outside both windows.
	flat := samplesEvery(d, 10*time.Second, func(at time.Duration) int64 {
		if at < 30*time.Second {
			return 200 * mib
		}
		return 40 * mib
	})
	g, err := judgeGrowth(flat, d)
	if err != nil || !g.Pass || g.Base != 40*mib || g.Final != 40*mib || g.BaseN != 6 || g.FinalN != 6 {
		t.Fatalf("flat: %+v, %v", g, err)
	}
	if g.Limit != 40*mib*1.2+8*mib || g.MaxRSS != 200*mib || g.MinRSS != 40*mib {
		t.Fatalf("flat limit/extremes: %+v", g)
	}
	// A leak of 1 MiB every 10 s: 54 MiB more at the end, over 1.2x40+8.
	leak := samplesEvery(d, 10*time.Second, func(at time.Duration) int64 { return 40*mib + int64(at/(10*time.Second))*mib })
	if g, err := judgeGrowth(leak, d); err != nil || g.Pass {
		t.Fatalf("leak must fail: %+v, %v", g, err)
	}
	// Growth within the slack passes: +7 MiB on a small base.
	small := samplesEvery(d, 10*time.Second, func(at time.Duration) int64 {
		if at > 9*time.Minute {
			return 17 * mib
		}
		return 10 * mib
	})
	if g, err := judgeGrowth(small, d); err != nil || !g.Pass {
		t.Fatalf("growth within the slack must pass: %+v, %v", g, err)
	}
	// A 1-minute soak sampled every 10 s has samples in both windows.
	if g, err := judgeGrowth(samplesEvery(time.Minute, 10*time.Second, func(time.Duration) int64 { return mib }), time.Minute); err != nil || g.BaseN == 0 || g.FinalN == 0 {
		t.Fatalf("1m soak: %+v, %v", g, err)
	}
	// Too few samples: an error, not a pass.
	if _, err := judgeGrowth([]RSSSample{{At: 0, RSS: mib}}, d); err == nil {
		t.Fatal("one sample: want an error")
	}
}

func TestSoakReportRender(t *testing.T) {
	d := time.Minute
	samples := samplesEvery(d, 10*time.Second, func(time.Duration) int64 { return 30 << 20 })
	g, err := judgeGrowth(samples, d)
	if err != nil {
		t.Fatal(err)
	}
	r := &SoakReport{Config: SoakConfig{Duration: d, Interval: 10 * time.Second, Concurrency: 16, Identity: "netlink"}, Samples: samples, Growth: g}
	var b strings.Builder
	if err := r.Render(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"soak: PASS", "t=0s", "t=1m0s", "30.0 MiB", "limit 44.0 MiB", "rule: RSS may not grow"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	r.Problem = "the boundary exited"
	b.Reset()
	if err := r.Render(&b); err != nil {
		t.Fatal(err)
	}
	if r.Pass() || !strings.Contains(b.String(), "soak: FAIL") || !strings.Contains(b.String(), "problem: the boundary exited") {
		t.Fatalf("a problem must fail the soak:\n%s", b.String())
	}
}
