package linelimit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// EntryOverhead is what a line adds when it is written to workload.log:
// "TIME S " before it (TIME the unix time in milliseconds, 13 digits until
// the year 2286) and the newline after it. The byte rate is of entries,
// so that it bounds what the log's writes take.
const EntryOverhead = 17

// MinByteBurst is the least a byte-rate bucket holds: a rate of a few
// bytes a second still lets a line through now and then.
const MinByteBurst = 64 << 10

// Reason says why lines were dropped.
type Reason int

// Reasons, the index of Counts.
const (
	// OverLines: over the line rate (Limits.LinesPerSec and Burst).
	OverLines Reason = iota
	// OverBytes: over the byte rate (Limits.BytesPerSec: the sandbox's
	// io-bps).
	OverBytes
	// Behind: the reader of the lines let through fell behind (init's
	// buffer for the supervisor was full).
	Behind
	// Lost: a write failed (the log's, or init's to the supervisor), or
	// a rotation.
	Lost
	// NumReasons is the number of reasons.
	NumReasons
)

// String names the reason.
func (r Reason) String() string {
	switch r {
	case OverLines:
		return "over-lines"
	case OverBytes:
		return "over-bytes"
	case Behind:
		return "behind"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Counts are lines dropped, by Reason.
type Counts [NumReasons]int64

// Total is the lines dropped for any reason.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	for i, v := range o {
		c[i] += v
	}
}

// Limits bound a stream of lines; zero fields bound nothing.
type Limits struct {
	// LinesPerSec is the line rate.
	LinesPerSec float64 `json:"lines_per_sec,omitempty"`
	// Burst is how many lines may pass at once (0: one second's worth).
	Burst float64 `json:"burst,omitempty"`
	// BytesPerSec is the byte rate, of entries (a line and
	// EntryOverhead); its burst is a second's worth, at least
	// MinByteBurst.
	BytesPerSec float64 `json:"bytes_per_sec,omitempty"`
}

// maxRate bounds every field: far above any rate a stream can reach, and
// below where a float's arithmetic on tokens gets coarse.
const maxRate = 1 << 40

// Validate refuses a negative, infinite or absurd field.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"lines per second", l.LinesPerSec}, {"burst", l.Burst}, {"bytes per second", l.BytesPerSec}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > maxRate {
			errs = append(errs, fmt.Errorf("linelimit: %s %v: want a number from 0 (no limit) to %d", f.name, f.v, int64(maxRate)))
		}
	}
	return errors.Join(errs...)
}

// LineBurst is the line bucket's size: Burst, or one second's worth.
func (l Limits) LineBurst() float64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.LinesPerSec
}

// Bucket is a token bucket: rate tokens a second, at most burst at once
// (rate 0: no limit). A clock that jumps back refills nothing; one that
// jumps ahead refills at most burst. It is not safe for concurrent use.
type Bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// NewBucket returns a full bucket (burst 0: one second's worth).
func NewBucket(rate, burst float64, now time.Time) Bucket {
	if burst <= 0 {
		burst = rate
	}
	return Bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// Refill adds what the time since the last refill earned.
func (b *Bucket) Refill(now time.Time) {
	if d := now.Sub(b.last).Seconds(); d > 0 && b.rate > 0 {
		b.tokens = min(b.burst, b.tokens+d*b.rate)
	}
	b.last = now
}

// Has reports whether n tokens are there (always, without a rate).
func (b *Bucket) Has(n float64) bool { return b.rate <= 0 || b.tokens >= n }

// Take takes n tokens (below zero when the caller insists: a marker).
func (b *Bucket) Take(n float64) {
	if b.rate > 0 {
		b.tokens -= n
	}
}

// Limiter lets lines through within Limits. It is not safe for
// concurrent use.
type Limiter struct {
	lim          Limits
	lines, bytes Bucket
}

// NewLimiter returns a limiter with full buckets.
func NewLimiter(l Limits, now time.Time) *Limiter {
	return &Limiter{lim: l, lines: NewBucket(l.LinesPerSec, l.Burst, now),
		bytes: NewBucket(l.BytesPerSec, max(l.BytesPerSec, MinByteBurst), now)}
}

// Limits are the limiter's limits.
func (l *Limiter) Limits() Limits { return l.lim }

// Refill refills both buckets.
func (l *Limiter) Refill(now time.Time) {
	l.lines.Refill(now)
	l.bytes.Refill(now)
}

// Room is at most how many lines the rates let through now (-1: any), and
// which rate says so; it refills first.
func (l *Limiter) Room(now time.Time) (int, Reason) {
	l.Refill(now)
	n, why := -1, OverLines
	if l.lim.LinesPerSec > 0 {
		n = int(max(l.lines.tokens, 0))
	}
	if l.lim.BytesPerSec > 0 {
		// The shortest entry: an empty line.
		if b := int(max(l.bytes.tokens, 0) / EntryOverhead); n < 0 || b < n {
			n, why = b, OverBytes
		}
	}
	return n, why
}

// Allows reports whether a line whose entry takes size bytes fits both
// rates now (as of the last Refill), and if not, which rate refuses it.
// It takes nothing: Take does, once the line is kept.
func (l *Limiter) Allows(size int) (Reason, bool) {
	switch {
	case !l.lines.Has(1):
		return OverLines, false
	case !l.bytes.Has(float64(size)):
		return OverBytes, false
	}
	return 0, true
}

// Take charges a kept line whose entry takes size bytes.
func (l *Limiter) Take(size int) {
	l.lines.Take(1)
	l.bytes.Take(float64(size))
}

// Charge charges size bytes to the byte rate whatever it holds (a marker:
// it is written anyway, and the next lines pay for it).
func (l *Limiter) Charge(now time.Time, size int) {
	l.bytes.Refill(now)
	l.bytes.Take(float64(size))
}
