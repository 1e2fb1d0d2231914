package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/stockade-dev/stockade/bench/loadgen"
)

// maxHold is the most tunnels the memory rows hold open at once: within
// the boundary's default --max-conns (1024, per sandbox for a gateway),
// with room left for a probe.
const maxHold = 1000

// idleQuiet is how long every server is left without load before its idle
// RSS is read.
const idleQuiet = 2 * time.Second

// rssResult is one system's memory: idle, with tunnels held open, and
// idle again after the throughput measurements.
type rssResult struct {
	idle, held, after int64 // VmRSS bytes; 0: not measured
	idleAnon          int64 // anonymous memory idle (procAnon); 0: not measured
	hold              loadgen.HoldResult
	haveHold          bool     // hold is the final report of a hold load
	errs              []string // why a figure is missing
}

// perTunnel is the RSS added per established tunnel, in bytes; ok is
// false when either figure or the tunnels are missing.
func (r *rssResult) perTunnel() (float64, bool) {
	if r == nil || r.idle <= 0 || r.held <= 0 || r.hold.Established <= 0 {
		return 0, false
	}
	return float64(r.held-r.idle) / float64(r.hold.Established), true
}

// memSystems are the systems whose process's RSS is reported.
func (h *harness) memSystems() []*system {
	return usable([]*system{h.stockade, h.sandbox, h.tinyproxy})
}

func (h *harness) rssOf(s *system) *rssResult {
	r := h.rss[s.name]
	if r == nil {
		r = &rssResult{}
		h.rss[s.name] = r
	}
	return r
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// measureIdleRSS reads each server's RSS after idleQuiet without load:
// before any load but the start-up probe, or (after) once the throughput
// measurements are done.
func (h *harness) measureIdleRSS(ctx context.Context, after bool) {
	systems := h.memSystems()
	if len(systems) == 0 || ctx.Err() != nil {
		return
	}
	sleepCtx(ctx, idleQuiet)
	what := "idle"
	if after {
		what = "idle after the runs"
	}
	for _, s := range systems {
		r := h.rssOf(s)
		v, err := procRSS(s.pid)
		if err != nil {
			r.errs = append(r.errs, what+": "+err.Error())
			continue
		}
		if after {
			r.after = v
		} else {
			r.idle = v
			if a, err := procAnon(s.pid); err != nil {
				r.errs = append(r.errs, what+": "+err.Error())
			} else {
				r.idleAnon = a
			}
		}
		h.cfg.Log.Info().Str("system", s.name).Str("rss", fmtBytes(float64(v))).Msg(what)
	}
}

// measureHeldRSS holds cfg.HoldTunnels tunnels open through each server
// (loadgen hold, inside the sandbox for the sandbox) and reads its RSS a
// moment after they are all open. It runs right after the first idle
// reading, so that the difference is the tunnels' (not the heap the
// throughput loads leave behind).
func (h *harness) measureHeldRSS(ctx context.Context) {
	if h.cfg.HoldTunnels == 0 {
		return
	}
	settle := min(time.Second, h.cfg.HoldFor/2)
	for _, s := range h.memSystems() {
		if ctx.Err() != nil {
			return
		}
		r := h.rssOf(s)
		var rssErr error
		res, err := h.runHold(ctx, s, func(loadgen.HoldResult) {
			sleepCtx(ctx, settle)
			r.held, rssErr = procRSS(s.pid)
		})
		if h.failure(ctx, s, "hold", err) {
			r.errs = append(r.errs, "hold: "+err.Error())
			continue
		}
		if rssErr != nil {
			r.errs = append(r.errs, "held: "+rssErr.Error())
		}
		r.hold, r.haveHold = res, true
		h.cfg.Log.Info().Str("system", s.name).Int("open", res.Established).Int("alive", res.Alive).
			Str("rss", fmtBytes(float64(r.held))).Int64("errors", res.Errors).Msg("hold")
	}
}

// runHold runs `loadgen hold` through s and calls held (which may take a
// moment) while the tunnels are open; it returns the final report.
func (h *harness) runHold(ctx context.Context, s *system, held func(loadgen.HoldResult)) (loadgen.HoldResult, error) {
	bound := h.cfg.HoldFor + 30*time.Second // opening them, at a few hundred a second
	ctx, cancel := context.WithTimeout(ctx, bound+30*time.Second)
	defer cancel()
	args := append(h.loadgenArgs("hold", s, h.echoPort, h.cfg.HoldFor), "-n", strconv.Itoa(h.cfg.HoldTunnels))
	path, argv := h.loadgenCmd(s, bound, args)
	var final loadgen.HoldResult
	phases := &holdPhases{held: held, final: &final}
	if err := streamCmd(ctx, h.dir, path, argv, phases.line); err != nil {
		return final, err
	}
	if err := phases.complete(); err != nil {
		return final, err
	}
	return final, nil
}

// holdPhases reads the two lines of `loadgen hold`: "held", then "done".
type holdPhases struct {
	held    func(loadgen.HoldResult)
	final   *loadgen.HoldResult
	sawHeld bool
	sawDone bool
}

func (p *holdPhases) line(b []byte) error {
	var r loadgen.HoldResult
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("loadgen hold output %q: %w", b, err)
	}
	switch {
	case r.Phase == "held" && !p.sawHeld && !p.sawDone:
		p.sawHeld = true
		if p.held != nil {
			p.held(r)
		}
	case r.Phase == "done" && p.sawHeld && !p.sawDone:
		p.sawDone = true
		*p.final = r
	default:
		return fmt.Errorf("loadgen hold: unexpected line %q (held seen %v, done seen %v)", b, p.sawHeld, p.sawDone)
	}
	return nil
}

// complete wants both lines to have come.
func (p *holdPhases) complete() error {
	if !p.sawHeld || !p.sawDone {
		return fmt.Errorf("loadgen hold ended without its reports (held %v, done %v)", p.sawHeld, p.sawDone)
	}
	return nil
}
