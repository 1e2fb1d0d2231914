package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/sandbox/spec"
)

// The workload's output goes to workload.log (contract.WorkloadLog) in
// the form of logs.WorkloadHeader: one "TIME STREAM LINE" line per line
// of output. Each stream is a pipe that a goroutine drains without pause:
// the workload never waits for its log. What the log cannot keep is
// dropped and counted, never waited for:
//
//   - lines over the sandbox's line rate (a bucket of LogBurst lines
//     refilled at LogLinesPerSec);
//   - with --io-bps, lines over that many bytes a second written to the
//     log (the supervisor's writes are not in the sandbox's cgroup, so the
//     kernel's throttle does not see them: the same figure applies here);
//   - lines a failed write or rotation lost.
//
// At most once a second a marker line (stream logs.WorkloadMarker) says
// how many lines were dropped since the last one, and why. The files stay
// within LogBytes together (logFile: rotated at a quarter of it, three
// rotated files kept).
const (
	// maxLineBytes cuts a longer line into pieces of at most this size.
	maxLineBytes = 16 << 10
	// partialAfter is how long an unfinished line (a prompt, a progress
	// bar) waits for its newline before it is written as it is.
	partialAfter = 200 * time.Millisecond
	// drainWait bounds how long the supervisor waits, as it ends, for the
	// pipes' last bytes.
	drainWait = 2 * time.Second
	// markerEvery is the most often a marker line is written.
	markerEvery = time.Second
	// retryEvery is how long a log whose rotation failed waits before it
	// tries again (meanwhile its lines are dropped, as failed).
	retryEvery = time.Second
	// minByteBurst is the least a byte-rate bucket holds (a rate of a few
	// bytes a second still passes a line now and then).
	minByteBurst = 64 << 10
)

// logLimits bound the workload's log (0: no bound).
type logLimits struct {
	maxBytes int64   // the files together on disk
	lines    float64 // lines a second
	burst    float64 // lines at once (0: one second's worth)
	bps      float64 // bytes a second written (the sandbox's io-bps)
}

func logLimitsOf(l spec.Limits) logLimits {
	return logLimits{maxBytes: l.LogBytes, lines: float64(l.LogLinesPerSec), burst: float64(l.LogBurst), bps: float64(l.IOBps)}
}

// bucket is a token bucket: rate tokens a second, at most burst at once
// (rate 0: no limit). A clock that jumps back refills nothing; one that
// jumps ahead refills at most burst.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate, burst float64, now time.Time) bucket {
	if burst <= 0 {
		burst = rate
	}
	return bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func (b *bucket) refill(now time.Time) {
	if d := now.Sub(b.last).Seconds(); d > 0 && b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+d*b.rate)
	}
	b.last = now
}

func (b *bucket) has(n float64) bool { return b.rate <= 0 || b.tokens >= n }

// take takes n tokens (below zero when the caller insists: a marker).
func (b *bucket) take(n float64) {
	if b.rate > 0 {
		b.tokens -= n
	}
}

// Reasons a line is dropped (index of drops).
const (
	dropRate   = iota // over the line rate
	dropBytes         // over the byte rate (io-bps)
	dropFailed        // a write or rotation failed
	dropReasons
)

// workloadLog writes the workload's stdout and stderr to its log.
type workloadLog struct {
	clk    clock.Clock
	log    zerolog.Logger
	limits logLimits
	wg     sync.WaitGroup
	// ends are the write ends handed to the workload (closed here once it
	// has them).
	ends []*os.File

	mu    sync.Mutex
	file  *logFile
	lines bucket // lines kept
	bytes bucket // bytes written
	buf   []byte // entries of one write, not yet written
	inBuf int64  // lines in buf
	// drops counts the lines dropped since the last marker, by reason;
	// dropsSince is when the first of them was.
	drops      [dropReasons]int64
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
	now := clk.Now()
	l := &workloadLog{clk: clk, log: log, limits: limits, file: file,
		lines: newBucket(limits.lines, limits.burst, now), bytes: newBucket(limits.bps, max(limits.bps, minByteBurst), now)}
	l.diskBytes.Store(file.bytes())
	return l
}

// pipe returns the write end of a new pipe for stream (logs.WorkloadOut
// or logs.WorkloadErr), for the workload, and starts draining its read
// end into the log.
func (l *workloadLog) pipe(stream byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervisor: workload %c pipe: %w (out of descriptors?)", stream, err)
	}
	l.ends = append(l.ends, w)
	lw := l.stream(stream)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = lw.Write(buf[:n])
			}
			if err != nil { // EOF: every process holding the write end is gone
				lw.flush()
				return
			}
		}
	}()
	return w, nil
}

// handedOver closes this process's copies of the write ends: once the
// workload (and whatever it started) closes its own, the pipes end.
func (l *workloadLog) handedOver() {
	for _, w := range l.ends {
		_ = w.Close()
	}
	l.ends = nil
}

// close waits (at most d) for the pipes to be drained, writes the last
// marker and closes the file.
func (l *workloadLog) close(d time.Duration) {
	l.handedOver()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		l.log.Warn().Dur("waited", d).Msg("workload output still open (a process of the sandbox outlived it); its last lines may be lost")
	}
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

// stream returns a line writer for stream.
func (l *workloadLog) stream(stream byte) *lineWriter {
	return &lineWriter{sink: l, stream: stream, max: maxLineBytes, after: partialAfter}
}

// room is at most how many lines the rates let through now (-1: any),
// and which rate says so.
func (l *workloadLog) room() (n, why int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	n, why = -1, dropRate
	if l.limits.lines > 0 {
		l.lines.refill(now)
		n = int(max(l.lines.tokens, 0))
	}
	if l.limits.bps > 0 {
		l.bytes.refill(now)
		// The shortest entry: a time of 13 digits, the stream, two spaces
		// and the newline.
		if b := int(max(l.bytes.tokens, 0) / 17); n < 0 || b < n {
			n, why = b, dropBytes
		}
	}
	return n, why
}

// write appends lines of stream, each stamped with the current time, in
// one write(2) (two when the file rotates between them); what the limits
// do not let through is dropped and counted.
func (l *workloadLog) write(stream byte, lines [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	now := l.clk.Now()
	l.lines.refill(now)
	l.bytes.refill(now)
	var prefix [32]byte
	pre := logs.AppendWorkloadPrefix(prefix[:0], now, stream)
	for _, line := range lines {
		n := len(pre) + len(line) + 1
		switch {
		case !l.lines.has(1):
			l.dropLocked(dropRate, 1, now)
			continue
		case !l.bytes.has(float64(n)):
			l.dropLocked(dropBytes, 1, now)
			continue
		case !l.roomLocked(n, now):
			l.dropLocked(dropFailed, 1, now)
			continue
		}
		l.lines.take(1)
		l.bytes.take(float64(n))
		l.buf = append(append(append(l.buf, pre...), line...), '\n')
		l.inBuf++
	}
	l.flushLocked(now)
}

// drop counts n lines of output dropped (for why) before they were cut
// apart: the writer's fast path.
func (l *workloadLog) drop(n, why int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.dropLocked(why, int64(n), l.clk.Now())
	}
}

func (l *workloadLog) dropLocked(why int, n int64, now time.Time) {
	if n <= 0 {
		return
	}
	if l.pendingDrops() == 0 {
		l.dropsSince = now
	}
	l.drops[why] += n
	l.dropped.Add(n)
	if l.markerStop == nil {
		l.markerStop = l.clk.AfterFunc(markerEvery, l.markerDue)
	}
}

func (l *workloadLog) pendingDrops() int64 {
	var n int64
	for _, d := range l.drops {
		n += d
	}
	return n
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
		l.dropLocked(dropFailed, l.inBuf, now)
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
	if l.pendingDrops() == 0 {
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
	l.bytes.refill(now)
	l.bytes.take(float64(len(entry)))
	l.flushLocked(now)
	err := l.file.write(entry)
	l.diskBytes.Store(l.file.bytes())
	if err != nil {
		l.markerStop = l.clk.AfterFunc(markerEvery, l.markerDue)
		return
	}
	l.drops = [dropReasons]int64{}
}

// markerText says how many lines were dropped since dropsSince, and why.
func (l *workloadLog) markerText(now time.Time) string {
	var why []string
	if n := l.drops[dropRate]; n > 0 {
		why = append(why, fmt.Sprintf("%d over the line rate (%d lines/s, burst %d)", n, int64(l.limits.lines), int64(l.lines.burst)))
	}
	if n := l.drops[dropBytes]; n > 0 {
		why = append(why, fmt.Sprintf("%d over the write rate (%s/s, the sandbox's io-bps)", n, cgroup.FormatBytes(int64(l.limits.bps))))
	}
	if n := l.drops[dropFailed]; n > 0 {
		why = append(why, fmt.Sprintf("%d lost: the log could not be written or rotated (see supervisor.log)", n))
	}
	span := max(now.Sub(l.dropsSince), 0).Round(time.Millisecond)
	return fmt.Sprintf("%d lines of output dropped in %s: %s", l.pendingDrops(), span, strings.Join(why, "; "))
}

// lineWriter cuts one stream into lines: complete lines are written at
// once, a line longer than max in pieces of max bytes (cut at a rune
// boundary), an unfinished line after it waited for its end for after.
type lineWriter struct {
	sink   *workloadLog
	stream byte
	max    int
	after  time.Duration

	mu        sync.Mutex
	buf       []byte    // the unfinished line
	since     time.Time // when buf got its first byte
	timerStop func() bool
	lines     [][]byte // one Write's lines (kept for its capacity)
}

// Write takes any bytes; it never fails, and never waits for the file
// beyond one write(2). The lines the rates cannot take now are only
// counted (no copy, no cut): a flood costs a count of its newlines.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	room, why := w.sink.room()
	w.lines = w.lines[:0]
	for len(p) > 0 {
		if room >= 0 && len(w.lines) >= room {
			// Every complete line left is over a rate: count them.
			if k := bytes.LastIndexByte(p, '\n'); k >= 0 {
				w.sink.drop(bytes.Count(p[:k+1], []byte{'\n'}), why)
				w.buf, p = w.buf[:0], p[k+1:]
			}
			if len(w.buf)+len(p) <= w.max { // the start of the next line
				if len(w.buf) == 0 && len(p) > 0 {
					w.since = w.sink.clk.Now()
				}
				w.buf = append(w.buf, p...)
				break
			}
		}
		seg, nl := p, false
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			seg, p, nl = p[:i], p[i+1:], true
		} else {
			p = nil
		}
		for len(w.buf)+len(seg) > w.max {
			k := w.max - len(w.buf)
			if c := runeCut(seg, k); c > 0 || len(w.buf) > 0 {
				k = c
			}
			w.lines = append(w.lines, w.join(seg[:k]))
			seg = seg[k:]
		}
		if nl {
			w.lines = append(w.lines, w.join(seg))
			continue
		}
		if len(w.buf) == 0 && len(seg) > 0 {
			w.since = w.sink.clk.Now()
		}
		w.buf = append(w.buf, seg...)
	}
	if len(w.lines) > 0 {
		w.sink.write(w.stream, w.lines)
		clear(w.lines)
	}
	if len(w.buf) > 0 && w.timerStop == nil {
		w.timerStop = w.sink.clk.AfterFunc(w.after, w.partial)
	}
	return n, nil
}

// join is the unfinished line followed by seg, as a line of its own
// (seg itself when nothing waits: no copy); the unfinished line is then
// empty.
func (w *lineWriter) join(seg []byte) []byte {
	if len(w.buf) == 0 {
		return seg
	}
	line := append(append(make([]byte, 0, len(w.buf)+len(seg)), w.buf...), seg...)
	w.buf = w.buf[:0]
	return line
}

// partial writes the unfinished line once it has waited long enough.
func (w *lineWriter) partial() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timerStop = nil
	if len(w.buf) == 0 {
		return
	}
	if wait := w.after - w.sink.clk.Now().Sub(w.since); wait > 0 {
		w.timerStop = w.sink.clk.AfterFunc(wait, w.partial) // it started after this timer was set
		return
	}
	w.sink.write(w.stream, [][]byte{w.buf})
	w.buf = w.buf[:0]
}

// flush writes the unfinished line now (the stream ended).
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timerStop != nil {
		w.timerStop()
		w.timerStop = nil
	}
	if len(w.buf) > 0 {
		w.sink.write(w.stream, [][]byte{w.buf})
		w.buf = w.buf[:0]
	}
}

// runeCut returns k, or less so that p[:k] does not end inside a
// multi-byte character (0 when none fits).
func runeCut(p []byte, k int) int {
	if k >= len(p) {
		return k
	}
	for c := k; c >= 0 && c > k-utf8.UTFMax; c-- {
		if utf8.RuneStart(p[c]) {
			return c
		}
	}
	return k
}
