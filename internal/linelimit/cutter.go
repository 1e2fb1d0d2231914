package linelimit

import (
	"bytes"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/internal/clock"
)

// Sink takes the lines a Cutter cuts. Its methods are called with the
// Cutter's lock held, one at a time per Cutter.
type Sink interface {
	// Room is at most how many lines the sink takes now (-1: any), and
	// why no more.
	Room() (int, Reason)
	// Lines takes complete lines (without their newlines). The slices
	// are valid only during the call; the sink may still drop some of
	// them (it counts those itself).
	Lines(lines [][]byte)
	// Drop counts n lines dropped before they were cut apart, for why.
	Drop(n int, why Reason)
}

// Cutter cuts one stream into lines for its Sink: the complete lines of a
// Write at once, a line longer than max in pieces of at most max bytes
// (cut at a rune boundary), an unfinished line once it has waited after
// for its end. The lines over the sink's Room are only counted, never cut
// apart or copied: a flood costs a count of its newlines. It holds at most
// max bytes of an unfinished line, and the slice headers of one Write's
// lines (no more than the sink's room, and than one per newline and piece
// written).
type Cutter struct {
	sink  Sink
	clk   clock.Clock
	max   int
	after time.Duration

	mu        sync.Mutex
	buf       []byte    // the unfinished line
	since     time.Time // when buf got its first byte
	timerStop func() bool
	lines     [][]byte // one Write's lines (kept for its capacity)
}

// NewCutter returns a cutter of lines of at most maxLine bytes (at least
// utf8.UTFMax) that waits after for the end of an unfinished line.
func NewCutter(sink Sink, clk clock.Clock, maxLine int, after time.Duration) *Cutter {
	return &Cutter{sink: sink, clk: clk, max: max(maxLine, utf8.UTFMax), after: after}
}

// Write takes any bytes; it never fails, and never waits for more than
// the sink's calls.
func (c *Cutter) Write(p []byte) (int, error) {
	n := len(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	room, why := c.sink.Room()
	c.lines = c.lines[:0]
	for len(p) > 0 {
		if room >= 0 && len(c.lines) >= room {
			// Every complete line left is over the room: count them.
			if k := bytes.LastIndexByte(p, '\n'); k >= 0 {
				c.sink.Drop(bytes.Count(p[:k+1], []byte{'\n'}), why)
				c.buf, p = c.buf[:0], p[k+1:]
			}
			if len(c.buf)+len(p) <= c.max { // the start of the next line
				if len(c.buf) == 0 && len(p) > 0 {
					c.since = c.clk.Now()
				}
				c.buf = append(c.buf, p...)
				break
			}
		}
		seg, nl := p, false
		if i := bytes.IndexByte(p, '\n'); i >= 0 {
			seg, p, nl = p[:i], p[i+1:], true
		} else {
			p = nil
		}
		for len(c.buf)+len(seg) > c.max {
			k := c.max - len(c.buf)
			if cut := runeCut(seg, k); cut > 0 || len(c.buf) > 0 {
				k = cut
			}
			c.lines = append(c.lines, c.join(seg[:k]))
			seg = seg[k:]
		}
		if nl {
			c.lines = append(c.lines, c.join(seg))
			continue
		}
		if len(c.buf) == 0 && len(seg) > 0 {
			c.since = c.clk.Now()
		}
		c.buf = append(c.buf, seg...)
	}
	if len(c.lines) > 0 {
		c.sink.Lines(c.lines)
		clear(c.lines)
	}
	if len(c.buf) > 0 && c.timerStop == nil {
		c.timerStop = c.clk.AfterFunc(c.after, c.partial)
	}
	return n, nil
}

// join is the unfinished line followed by seg, as a line of its own (seg
// itself when nothing waits: no copy); the unfinished line is then empty.
func (c *Cutter) join(seg []byte) []byte {
	if len(c.buf) == 0 {
		return seg
	}
	line := append(append(make([]byte, 0, len(c.buf)+len(seg)), c.buf...), seg...)
	c.buf = c.buf[:0]
	return line
}

// partial passes on the unfinished line once it has waited long enough.
func (c *Cutter) partial() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timerStop = nil
	if len(c.buf) == 0 {
		return
	}
	if wait := c.after - c.clk.Now().Sub(c.since); wait > 0 {
		c.timerStop = c.clk.AfterFunc(wait, c.partial) // it started after this timer was set
		return
	}
	c.flushLocked()
}

// Flush passes on the unfinished line now (the stream ended).
func (c *Cutter) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timerStop != nil {
		c.timerStop()
		c.timerStop = nil
	}
	c.flushLocked()
}

// flushLocked passes on the unfinished line.
func (c *Cutter) flushLocked() {
	if len(c.buf) > 0 {
		c.sink.Lines([][]byte{c.buf})
		c.buf = c.buf[:0]
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
