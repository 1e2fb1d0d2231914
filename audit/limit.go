package audit

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/clock"
)

// DenialLimit bounds the denial lines a LogSink writes where an audit file
// records every decision: at most Max lines per window; the denials past
// that are counted, and the count is logged (one warn line, the field
// denialsNotLogged) when the window ends, or at Flush. Without it a
// workload that asks for names or hosts it may not reach writes a log line
// per denial into a log that nothing rotates (a supervisor's log: tens of
// megabytes a second under a flood of denied DNS queries), while the audit
// file, which has every event, rotates.
//
// Denials are counted, never dropped from the audit file: the limit is on
// the log's copy only.
type DenialLimit struct {
	log    zerolog.Logger
	max    int
	window time.Duration
	clock  clock.Clock

	// report logs a window's count (nil: the audit's line, in Flush).
	report func(n int, since time.Time)

	mu      sync.Mutex
	start   time.Time // the window's start
	logged  int       // lines written in the window
	dropped int       // denials not logged since the last report
	since   time.Time // the first of them
	pending func() bool
}

// LimitOption configures a DenialLimit.
type LimitOption func(*DenialLimit)

// WithLimitClock replaces the clock that reads the time and arms the
// report of a window's count (default clock.System; tests: clock.Fake).
func WithLimitClock(c clock.Clock) LimitOption {
	return func(d *DenialLimit) { d.clock = c }
}

// WithLimitReport replaces the line that reports a window's count: report
// logs that n lines since since were left out. Another log that bounds its
// lines the same way (the transport's refusals) says what it left out in
// its own words.
func WithLimitReport(report func(n int, since time.Time)) LimitOption {
	return func(d *DenialLimit) { d.report = report }
}

// NewDenialLimit returns a limit of max denial lines per window; its
// reports go to log.
func NewDenialLimit(log zerolog.Logger, max int, window time.Duration, opts ...LimitOption) *DenialLimit {
	d := &DenialLimit{log: log, max: max, window: window, clock: clock.System{}}
	for _, o := range opts {
		o(d)
	}
	return d
}

// NewLineLimit is a limit of max lines per window of another log than an
// audit's (a gateway's refused requests or connections): its report says
// that n of what (e.g. "refused client requests") since since were not
// logged, as component.
func NewLineLimit(log zerolog.Logger, component, what string, max int, window time.Duration) *DenialLimit {
	return NewDenialLimit(log, max, window, WithLimitReport(func(n int, since time.Time) {
		log.Warn().Str("component", component).Int("notLogged", n).Time("since", since).Int("limit", max).Dur("window", window).
			Msgf("%d %s since %s were not logged: the log keeps %d per %s", n, what, since.UTC().Format(time.RFC3339), max, window)
	}))
}

// Allow reports whether one more line may be written now (the limit's
// clock); when not, the line is counted and reported with the window's
// count.
func (d *DenialLimit) Allow() bool { return d.allow(d.clock.Now()) }

// allow reports whether one more denial line may be written at now (read
// by the caller, once for a batch); when not, the denial is counted and
// its window's report is scheduled.
func (d *DenialLimit) allow(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	// A time a little before the window's start was read before another
	// caller opened it (the time is read once per batch, outside the
	// lock): it counts in the window. A clock that went back by a window
	// or more (this VM's can jump) starts a new one, as does the window's
	// end.
	if now.Before(d.start) && d.start.Sub(now) < d.window {
		now = d.start
	}
	if now.Before(d.start) || now.Sub(d.start) >= d.window {
		d.start, d.logged = now, 0
	}
	if d.logged < d.max {
		d.logged++
		return true
	}
	if d.dropped == 0 {
		d.since = now
	}
	d.dropped++
	if d.pending == nil {
		d.pending = d.clock.AfterFunc(d.start.Add(d.window).Sub(now), d.Flush)
	}
	return false
}

// Flush logs how many denials were left out of the log since the last
// report, if any, and cancels the scheduled report. The boundary calls it
// when it stops, so no count is lost with the process.
func (d *DenialLimit) Flush() {
	d.mu.Lock()
	n, since := d.dropped, d.since
	d.dropped = 0
	if d.pending != nil {
		d.pending() // false when Flush is that report: nothing to cancel
		d.pending = nil
	}
	d.mu.Unlock()
	if n > 0 && d.report != nil {
		d.report(n, since)
		return
	}
	if n > 0 {
		d.log.Warn().Str("component", "audit").Int("denialsNotLogged", n).Time("since", since).
			Int("limit", d.max).Dur("window", d.window).
			Msgf("%d denials since %s are in the audit file only: the log keeps %d per %s", n, since.UTC().Format(time.RFC3339), d.max, d.window)
	}
}
