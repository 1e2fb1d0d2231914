package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/bench/loadgen"
)

// The soak's growth rule: after a warm-up, the median RSS of the last
// window may exceed the median of the first window by at most
// soakGrowthFactor times plus soakGrowthSlack. Warm-up and windows are a
// minute each in a 10-minute soak and shrink with shorter ones (see
// soakWindows).
const (
	soakGrowthFactor = 1.2
	soakGrowthSlack  = 8 << 20 // bytes
	soakMaxDuration  = 3 * time.Hour
)

// SoakRule states the growth rule in words, for the command's help and
// the report.
const SoakRule = "RSS may not grow: the median of the last window's samples must be <= 1.2 x the median of the first " +
	"window after the warm-up + 8 MiB (warm-up min(1m, duration/6), windows min(1m, duration/4))"

// SoakConfig is one soak: a tunnels load through the standalone boundary
// for a long time while the boundary's RSS is sampled.
type SoakConfig struct {
	RepoDir     string        // module root
	Stockade    string        // prebuilt stockade binary; "" builds ./cmd/stockade
	Duration    time.Duration // of the load (at most 3h)
	Interval    time.Duration // between RSS samples
	Concurrency int           // loadgen tunnels -c
	Identity    string        // stockade --identity
	Audit       bool          // stockade --audit FILE (rotated by stockade)
	Keep        bool          // keep the run dir
	Log         zerolog.Logger
}

// DefaultSoakConfig is `make bench-soak`: 16 clients for 10 minutes, a
// sample every 10 s, the full path on (netlink identity, audit).
func DefaultSoakConfig() SoakConfig {
	return SoakConfig{RepoDir: ".", Duration: 10 * time.Minute, Interval: 10 * time.Second, Concurrency: 16,
		Identity: "netlink", Audit: true, Log: zerolog.Nop()}
}

// RSSSample is one reading of the server during the soak.
type RSSSample struct {
	At  time.Duration // since the load started
	RSS int64         // VmRSS bytes
	FDs int           // open file descriptors
}

// Growth is the soak's judgement of its samples: the windows, their
// medians, the limit the rule derives from the first, and the extremes.
type Growth struct {
	Warmup, Window     time.Duration
	BaseFrom, BaseTo   time.Duration // the first window: [BaseFrom, BaseTo)
	FinalFrom, FinalTo time.Duration // the last one: (FinalFrom, FinalTo]
	BaseN, FinalN      int           // samples in each
	Base, Final, Limit float64       // bytes
	Pass               bool
	MinRSS, MaxRSS     int64
	LastRSS            int64
	FirstFDs, LastFDs  int
}

// soakWindows are the warm-up and window lengths for a soak of d.
func soakWindows(d time.Duration) (warmup, window time.Duration) {
	return min(time.Minute, d/6), min(time.Minute, d/4)
}

// judgeGrowth applies the growth rule to the samples of a soak of d. It
// fails when a window holds no sample (too few samples for d).
func judgeGrowth(samples []RSSSample, d time.Duration) (Growth, error) {
	g := Growth{}
	g.Warmup, g.Window = soakWindows(d)
	g.BaseFrom, g.BaseTo = g.Warmup, g.Warmup+g.Window
	g.FinalFrom, g.FinalTo = d-g.Window, d
	var base, final []float64
	for i, s := range samples {
		if s.At >= g.BaseFrom && s.At < g.BaseTo {
			base = append(base, float64(s.RSS))
		}
		if s.At > g.FinalFrom {
			final = append(final, float64(s.RSS))
		}
		if i == 0 || s.RSS < g.MinRSS {
			g.MinRSS = s.RSS
		}
		g.MaxRSS = max(g.MaxRSS, s.RSS)
	}
	if len(samples) > 0 {
		g.FirstFDs, g.LastFDs, g.LastRSS = samples[0].FDs, samples[len(samples)-1].FDs, samples[len(samples)-1].RSS
	}
	g.BaseN, g.FinalN = len(base), len(final)
	if len(base) == 0 || len(final) == 0 {
		return g, fmt.Errorf("soak: %d sample(s) in the first window [%s, %s) and %d in the last (%s, %s]: too few for the rule (sample more often or soak longer)",
			len(base), g.BaseFrom, g.BaseTo, len(final), g.FinalFrom, g.FinalTo)
	}
	g.Base, g.Final = median(base), median(final)
	g.Limit = g.Base*soakGrowthFactor + soakGrowthSlack
	g.Pass = g.Final <= g.Limit
	return g, nil
}

// SoakReport is what a soak measured.
type SoakReport struct {
	Config  SoakConfig
	Samples []RSSSample
	Load    loadgen.TunnelResult
	Growth  Growth
	Problem string // why the soak failed besides growth (server exited, load failed)
}

// Pass says whether the soak passed: no problem and no growth.
func (r *SoakReport) Pass() bool { return r.Problem == "" && r.Growth.Pass }

// Render writes the samples and the verdict as text.
func (r *SoakReport) Render(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	audit := "off"
	if c.Audit {
		audit = "on (file)"
	}
	fmt.Fprintf(&b, "stockade boundary soak: %d clients through `boundary serve` (--identity %s, audit %s) for %s, RSS every %s\n",
		c.Concurrency, c.Identity, audit, c.Duration, c.Interval)
	fmt.Fprintf(&b, "rule: %s\n\n", SoakRule)
	b.WriteString("samples (t since the load started: VmRSS, open fds):\n")
	for i, s := range r.Samples {
		sep := "  "
		if i%4 == 3 || i == len(r.Samples)-1 {
			sep = "\n"
		}
		fmt.Fprintf(&b, "  t=%-6s %9s %4d fds%s", s.At.Round(time.Second), fmtBytes(float64(s.RSS)), s.FDs, sep)
	}
	g := r.Growth
	fmt.Fprintf(&b, "\nload: %d tunnels, %s/s, p50 %s, p99 %s, %d errors",
		r.Load.Tunnels, fmtRate(r.Load.PerSecond), fmtDur(float64(r.Load.P50Ns)), fmtDur(float64(r.Load.P99Ns)), r.Load.Errors)
	if r.Load.Errors > 0 {
		fmt.Fprintf(&b, " %v, first: %s", r.Load.ErrorKinds, r.Load.FirstError)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "RSS min %s, max %s, last %s; fds first %d, last %d\n",
		fmtBytes(float64(g.MinRSS)), fmtBytes(float64(g.MaxRSS)), fmtBytes(float64(g.LastRSS)), g.FirstFDs, g.LastFDs)
	if g.BaseN > 0 && g.FinalN > 0 {
		fmt.Fprintf(&b, "first window [%s, %s): median %s of %d; last window (%s, %s]: median %s of %d; limit %s (%+.1f%% over the first)\n",
			g.BaseFrom, g.BaseTo, fmtBytes(g.Base), g.BaseN, g.FinalFrom, g.FinalTo, fmtBytes(g.Final), g.FinalN,
			fmtBytes(g.Limit), 100*(g.Final-g.Base)/g.Base)
	}
	if r.Problem != "" {
		fmt.Fprintf(&b, "problem: %s\n", r.Problem)
	}
	verdict := "PASS"
	if !r.Pass() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "soak: %s\n", verdict)
	_, err := io.WriteString(w, b.String())
	return err
}

// Soak builds, starts the upstream and `stockade boundary serve`, runs
// `loadgen tunnels` through it for cfg.Duration while sampling its RSS
// every cfg.Interval (at most Duration/Interval+2 samples), stops
// everything and judges the growth. An error means the soak could not run
// or could not be judged; a report with Pass false means it ran and
// failed.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakReport, error) {
	if cfg.Duration <= 0 || cfg.Duration > soakMaxDuration || cfg.Interval <= 0 || cfg.Interval > cfg.Duration || cfg.Concurrency < 1 {
		return nil, fmt.Errorf("soak config: duration %s (0, %s], interval %s (0, duration] and concurrency %d >= 1 wanted",
			cfg.Duration, soakMaxDuration, cfg.Interval, cfg.Concurrency)
	}
	tools, err := checkTools(ctx, []string{"go"})
	if err != nil {
		return nil, err
	}
	if cfg.RepoDir, err = filepath.Abs(cfg.RepoDir); err != nil {
		return nil, fmt.Errorf("soak config: repo dir: %w", err)
	}
	dir, err := os.MkdirTemp("", "stockade-soak-")
	if err != nil {
		return nil, fmt.Errorf("soak: run dir: %w", err)
	}
	if cfg.Keep {
		cfg.Log.Info().Str("dir", dir).Msg("keeping run dir")
	} else {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	h := &harness{
		cfg: Config{RepoDir: cfg.RepoDir, Stockade: cfg.Stockade, Identity: cfg.Identity, Audit: cfg.Audit,
			Binary: "/**", DNSNames: 10, Log: cfg.Log},
		tools: tools, dir: dir, srvs: &servers{dir: dir, log: cfg.Log},
		stockade: &system{name: "stockade", host: upstreamName},
		sandbox:  &system{name: "sandbox", why: sandboxOff},
		rss:      map[string]*rssResult{}, failed: map[string][]string{},
	}
	defer h.srvs.stopAll()
	bin, err := h.build(ctx)
	if err != nil {
		return nil, err
	}
	if h.stockade.why != "" {
		return nil, fmt.Errorf("soak: stockade %s: %s", h.stockade.why, strings.Join(h.notes, "; "))
	}
	if err := h.startUpstream(ctx, cfg.Duration+time.Hour); err != nil {
		return nil, err
	}
	proxyPort, err := freePort()
	if err != nil {
		return nil, err
	}
	dnsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if h.files, err = writeFiles(fileParams{dir: dir, names: h.cfg.DNSNames, echoPort: h.echoPort, sinkPort: h.sinkPort,
		binary: h.cfg.Binary, tinyproxyPort: 1}); err != nil {
		return nil, err
	}
	h.startStockade(ctx, bin, proxyPort, dnsPort)
	if h.stockade.why != "" {
		return nil, fmt.Errorf("soak: stockade %s: %s", h.stockade.why, strings.Join(h.notes, "; "))
	}
	rep := &SoakReport{Config: cfg}
	rep.Samples, rep.Load, rep.Problem = h.soakLoad(ctx, cfg)
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("soak interrupted: %w", err)
	}
	g, err := judgeGrowth(rep.Samples, cfg.Duration)
	rep.Growth = g
	if err != nil {
		return rep, err
	}
	if rep.Problem == "" && rep.Load.Tunnels == 0 {
		rep.Problem = "no tunnel completed"
	}
	return rep, nil
}

// soakLoad runs the load and samples the server until the load ends.
// problem is non-empty when the load or the server failed.
func (h *harness) soakLoad(ctx context.Context, cfg SoakConfig) (samples []RSSSample, res loadgen.TunnelResult, problem string) {
	s := h.stockade
	maxSamples := int(cfg.Duration/cfg.Interval) + 2
	sample := func(at time.Duration) error {
		rss, err := procRSS(s.pid)
		if err != nil {
			return err
		}
		fds, err := procFDs(s.pid)
		if err != nil {
			return err
		}
		samples = append(samples, RSSSample{At: at, RSS: rss, FDs: fds})
		h.cfg.Log.Info().Str("t", at.Round(time.Second).String()).Str("rss", fmtBytes(float64(rss))).Int("fds", fds).Msg("sample")
		return nil
	}
	sampleErr := sample(0) // before the load: idle
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		var err error
		res, err = h.runTunnels(ctx, s, cfg.Concurrency, cfg.Duration)
		done <- err
	}()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			switch {
			case err != nil:
				problem = "load: " + oneLine(err.Error())
			case s.srv.exited():
				problem = "the boundary exited: " + oneLine(s.srv.failure(errors.New("exited")).Error())
			case sampleErr != nil:
				problem = "sampling: " + sampleErr.Error()
			}
			return samples, res, problem
		case <-tick.C:
			if len(samples) < maxSamples && sampleErr == nil {
				sampleErr = sample(time.Since(start))
			}
		}
	}
}
