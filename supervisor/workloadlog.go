package supervisor

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/linelimit"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/sandbox/nsrun"
	"github.com/stockade-dev/stockade/sandbox/spec"
)

// The workload's output goes to workload.log (contract.WorkloadLog) in
// the form of logs.WorkloadHeader: one "TIME STREAM LINE" line per line
// of output. The sandbox's init drains the workload's stdout and stderr,
// cuts them into lines and lets them through at the sandbox's line rate
// (a bucket of LogBurst lines refilled at LogLinesPerSec) and byte rate
// (the sandbox's io-bps), inside the sandbox's cgroup: a flood is the
// sandbox's CPU (nsrun.Spec.Output, package linelimit). workloadLog is
// the Output's sink: it stamps what init let through and writes it, and
// drops and counts, never waits for, what the log cannot keep:
//
//   - lines over the byte rate of the log's writes (the supervisor's
//     writes are not in the sandbox's cgroup, so the kernel's throttle
//     does not see them: the same io-bps applies here, markers included);
//   - lines a failed write or rotation lost.
//
// At most once a second a marker line (stream logs.WorkloadMarker) says
// how many lines were dropped since the last one, by init or here, and
// why. The files stay within LogBytes together (logFile: rotated at a
// quarter of it, three rotated files kept).
const (
	// markerEvery is the most often a marker line is written.
	markerEvery = time.Second
	// retryEvery is how long a log whose rotation failed waits before it
	// tries again (meanwhile its lines are dropped, as failed).
	retryEvery = time.Second
)

// logLimits bound the workload's log (0: no bound).
type logLimits struct {
	maxBytes int64            // the files together on disk
	rates    linelimit.Limits // init's: line rate, burst, byte rate (io-bps)
}

// logLimitsOf reads the spec's limits (a negative one is none).
func logLimitsOf(l spec.Limits) logLimits {
	return logLimits{maxBytes: max(l.LogBytes, 0), rates: linelimit.Limits{LinesPerSec: float64(max(l.LogLinesPerSec, 0)),
		Burst: float64(max(l.LogBurst, 0)), BytesPerSec: float64(max(l.IOBps, 0))}}
}

// workloadLog writes the workload's output, as init passes it on, to its
// log. It is an nsrun.OutputSink.
type workloadLog struct {
	clk    clock.Clock
	log    zerolog.Logger
	limits logLimits

	mu    sync.Mutex
	file  *logFile
	bytes *linelimit.Limiter // the byte rate of the log's writes
	buf   []byte             // entries of one write, not yet written
	inBuf int64              // lines in buf
	// drops counts the lines dropped since the last marker, by reason;
	// dropsSince is when the first of them was.
	drops      linelimit.Counts
	dropsSince time.Time
	markerStop func() bool // the armed marker timer (nil: none)
	failed     int64       // write failures, for the log's own warning
	retryAt    time.Time   // a failed rotation is not tried again before
	rotFailing bool        // the last rotation failed (said once)
	closed     bool

	// What the heartbeats report (read without mu).
	diskBytes atomic.Int64
	dropped   atomic.Int64
}

// newWorkloadLog writes to file within limits.
func newWorkloadLog(file *logFile, limits logLimits, clk clock.Clock, log zerolog.Logger) *workloadLog {
	l := &workloadLog{clk: clk, log: log, limits: limits, file: file,
		bytes: linelimit.NewLimiter(linelimit.Limits{BytesPerSec: limits.rates.BytesPerSec}, clk.Now())}
	l.diskBytes.Store(file.bytes())
	return l
}

// output is the nsrun.Output that has init pump the workload's output
// within the limits to this log.
func (l *workloadLog) output() *nsrun.Output {
	return &nsrun.Output{Limits: l.limits.rates, Sink: l}
}

// close writes the last marker and closes the file (the sandbox is
// closed: init has passed on all it had).
func (l *workloadLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markerLocked()
	if l.markerStop != nil {
		l.markerStop()
		l.markerStop = nil
	}
	l.closed = true
	if err := l.file.close(); err != nil {
		l.log.Warn().Err(err).Msg("workload log: close")
	}
}

// stats are the log's bytes on disk and the lines dropped so far.
func (l *workloadLog) stats() (diskBytes, dropped int64) {
	return l.diskBytes.Load(), l.dropped.Load()
}

// Lines implements nsrun.OutputSink.
func (l *workloadLog) Lines(s nsrun.Stream, lines [][]byte) {
	stream := logs.WorkloadOut
	if s == nsrun.Stderr {
		stream = logs.WorkloadErr
	}
	l.write(stream, lines)
}

// Dropped implements nsrun.OutputSink: init's counts, for the next marker.
func (l *workloadLog) Dropped(c linelimit.Counts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := l.clk.Now()
	for why, n := range c {
		l.dropLocked(linelimit.Reason(why), n, now)
	}
}

// write appends lines of stream, each stamped with the current time, in
// one write(2) (two when the file rotates between them); what the byte
// rate or the file does not let through is dropped and counted.
func (l *workloadLog) write(stream byte, lines [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := l.clk.Now()
	l.bytes.Refill(now)
	var prefix [32]byte
	pre := logs.AppendWorkloadPrefix(prefix[:0], now, stream)
	for _, line := range lines {
		n := len(pre) + len(line) + 1
		if why, ok := l.bytes.Allows(n); !ok {
			l.dropLocked(why, 1, now)
			continue
		}
		if !l.roomLocked(n, now) {
			l.dropLocked(linelimit.Lost, 1, now)
			continue
		}
		l.bytes.Take(n)
		l.buf = append(append(append(l.buf, pre...), line...), '\n')
		l.inBuf++
	}
	l.flushLocked(now)
}

func (l *workloadLog) dropLocked(why linelimit.Reason, n int64, now time.Time) {
	if n <= 0 {
		return
	}
	if l.drops.Total() == 0 {
		l.dropsSince = now
	}
	// Saturating: init's counts are bounded one by one (nsrun), not their sum.
	l.drops[why] = min(l.drops[why], math.MaxInt64-n) + n
	l.dropped.Store(min(l.dropped.Load(), math.MaxInt64-n) + n)
	if l.markerStop == nil {
		l.markerStop = l.clk.AfterFunc(markerEvery, l.markerDue)
	}
}

// roomLocked makes room for an entry of n bytes after what is buffered:
// the live file is rotated (what is buffered written to it first) when
// the entry would take it past its share. False: no room (the rotation
// failed, now or less than retryEvery ago).
func (l *workloadLog) roomLocked(n int, now time.Time) bool {
	if l.file.f != nil && l.file.fits(len(l.buf), n) {
		return true
	}
	if now.Before(l.retryAt) {
		return false
	}
	l.flushLocked(now)
	err := l.file.rotate() // again, when the last one failed half-way
	if err == nil {
		l.file.trim()
	}
	l.diskBytes.Store(l.file.bytes())
	if err != nil {
		l.retryAt = now.Add(retryEvery)
		if !l.rotFailing {
			l.log.Error().Err(err).Msg("workload log: rotation failed; lines are dropped until it works (tried again every second)")
		}
		l.rotFailing = true
		return false
	}
	if l.rotFailing {
		l.log.Info().Msg("workload log: rotated again")
		l.rotFailing = false
	}
	return l.file.fits(0, n)
}

// flushLocked writes what is buffered.
func (l *workloadLog) flushLocked(now time.Time) {
	if len(l.buf) == 0 {
		return
	}
	err := l.file.write(l.buf)
	l.diskBytes.Store(l.file.bytes())
	if err != nil {
		if l.failed++; l.failed == 1 || l.failed%1000 == 0 {
			l.log.Error().Err(err).Int64("failed_writes", l.failed).Msg("workload log: write failed; lines lost")
		}
		l.dropLocked(linelimit.Lost, l.inBuf, now)
	}
	l.buf, l.inBuf = l.buf[:0], 0
	if cap(l.buf) > 256<<10 {
		l.buf = nil // a rare large batch does not pin its memory
	}
}

// markerDue is the marker timer.
func (l *workloadLog) markerDue() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markerStop = nil
	if !l.closed {
		l.markerLocked()
	}
}

// markerLocked writes the marker line for the lines dropped since the
// last one. It is written whatever the rates say (at most one a second),
// its bytes charged to the byte rate. A marker that cannot be written
// keeps its counts for the next.
func (l *workloadLog) markerLocked() {
	if l.drops.Total() == 0 {
		return
	}
	now := l.clk.Now()
	var prefix [32]byte
	text := l.markerText(now)
	entry := append(logs.AppendWorkloadPrefix(prefix[:0], now, logs.WorkloadMarker), text...)
	entry = append(entry, '\n')
	if !l.roomLocked(len(entry), now) {
		l.markerStop = l.clk.AfterFunc(markerEvery, l.markerDue)
		return
	}
	l.bytes.Charge(now, len(entry))
	l.flushLocked(now)
	err := l.file.write(entry)
	l.diskBytes.Store(l.file.bytes())
	if err != nil {
		l.markerStop = l.clk.AfterFunc(markerEvery, l.markerDue)
		return
	}
	l.drops = linelimit.Counts{}
}

// markerText says how many lines were dropped since dropsSince, and why.
func (l *workloadLog) markerText(now time.Time) string {
	var why []string
	r := l.limits.rates
	if n := l.drops[linelimit.OverLines]; n > 0 {
		why = append(why, fmt.Sprintf("%d over the line rate (%d lines/s, burst %d)", n, int64(r.LinesPerSec), int64(r.LineBurst())))
	}
	if n := l.drops[linelimit.OverBytes]; n > 0 {
		why = append(why, fmt.Sprintf("%d over the write rate (%s/s, the sandbox's io-bps)", n, cgroup.FormatBytes(int64(r.BytesPerSec))))
	}
	if n := l.drops[linelimit.Behind]; n > 0 {
		why = append(why, fmt.Sprintf("%d while the log's writes were behind the output", n))
	}
	if n := l.drops[linelimit.Lost]; n > 0 {
		why = append(why, fmt.Sprintf("%d lost: the log could not be written or rotated (see supervisor.log)", n))
	}
	span := max(now.Sub(l.dropsSince), 0).Round(time.Millisecond)
	return fmt.Sprintf("%d lines of output dropped in %s: %s", l.drops.Total(), span, strings.Join(why, "; "))
}
