package linelimit

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/internal/clock"
)

var t0 = time.UnixMilli(1_700_000_000_123)

// limitedSink keeps what a Limiter lets through, as init does: a line's
// entry is the line and EntryOverhead.
type limitedSink struct {
	clk   *clock.Fake
	lim   *Limiter
	kept  []string
	drops Counts
	// calls counts Lines calls and the lines handed over in all.
	calls, handed int
}

func newLimitedSink(l Limits) *limitedSink {
	clk := clock.NewFake(t0)
	return &limitedSink{clk: clk, lim: NewLimiter(l, clk.Now())}
}

func (s *limitedSink) Room() (int, Reason) { return s.lim.Room(s.clk.Now()) }

func (s *limitedSink) Lines(lines [][]byte) {
	s.calls++
	s.handed += len(lines)
	s.lim.Refill(s.clk.Now())
	for _, l := range lines {
		size := len(l) + EntryOverhead
		if why, ok := s.lim.Allows(size); !ok {
			s.drops[why]++
			continue
		}
		s.lim.Take(size)
		s.kept = append(s.kept, string(l))
	}
}

func (s *limitedSink) Drop(n int, why Reason) { s.drops[why] += int64(n) }

func TestCutterCutsLines(t *testing.T) {
	s := newLimitedSink(Limits{})
	c := NewCutter(s, s.clk, 16<<10, 200*time.Millisecond)
	_, _ = c.Write([]byte("one\ntw"))
	_, _ = c.Write([]byte("o\n\nthree\n"))
	if got := strings.Join(s.kept, "|"); got != "one|two||three" {
		t.Fatalf("got %q", got)
	}
	// Each Write's complete lines go to the sink at once.
	if s.calls != 2 {
		t.Fatalf("%d calls of Lines, want 2", s.calls)
	}
}

func TestCutterCapsLongLines(t *testing.T) {
	s := newLimitedSink(Limits{})
	c := NewCutter(s, s.clk, 8, time.Second)
	// 20 bytes of ASCII, then runes of 3 bytes that must not be cut.
	_, _ = c.Write([]byte(strings.Repeat("a", 20) + "\n"))
	_, _ = c.Write([]byte("ab€€€€cd\n")) // 2 + 12 + 2 bytes
	_, _ = c.Write([]byte("1234567"))    // then 1 more byte of this line and a newline
	_, _ = c.Write([]byte("8\n"))
	want := []string{"aaaaaaaa", "aaaaaaaa", "aaaa", "ab€€", "€€cd", "12345678"}
	if strings.Join(s.kept, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", s.kept, want)
	}
	for _, l := range s.kept {
		if !utf8.ValidString(l) || len(l) > 8 {
			t.Fatalf("piece %q", l)
		}
	}
	// A line of nothing but bytes that start no rune is still cut.
	_, _ = c.Write(append(bytes.Repeat([]byte{0x80}, 20), '\n'))
	if n := len(s.kept); n != 9 || len(s.kept[6]) != 8 {
		t.Fatalf("a line of continuation bytes: %q", s.kept[6:])
	}
}

func TestCutterPassesAPartialLineAfterAWhile(t *testing.T) {
	s := newLimitedSink(Limits{})
	c := NewCutter(s, s.clk, 1024, 200*time.Millisecond)
	_, _ = c.Write([]byte("Password: "))
	s.clk.Advance(199 * time.Millisecond)
	if len(s.kept) != 0 {
		t.Fatalf("a partial line passed before it waited 200ms: %q", s.kept)
	}
	s.clk.Advance(time.Millisecond)
	if len(s.kept) != 1 || s.kept[0] != "Password: " {
		t.Fatalf("partial line %q after 200ms", s.kept)
	}
	// Its end arrives later: a line of its own.
	_, _ = c.Write([]byte("hunter2\n"))
	if len(s.kept) != 2 || s.kept[1] != "hunter2" {
		t.Fatalf("got %q", s.kept)
	}
	// Flush passes one on at once, and disarms its timer.
	_, _ = c.Write([]byte("last words"))
	c.Flush()
	if s.kept[2] != "last words" || s.clk.Pending() != 0 {
		t.Fatalf("after Flush: %q, %d timers", s.kept, s.clk.Pending())
	}
}

// TestLineRateAndBurst: 10 lines a second, 20 at once: a flood of 100
// lines keeps the burst and counts 80, without handing them over one by
// one; a second later 10 more pass.
func TestLineRateAndBurst(t *testing.T) {
	s := newLimitedSink(Limits{LinesPerSec: 10, Burst: 20})
	c := NewCutter(s, s.clk, 1024, time.Second)
	var flood bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&flood, "a%d\n", i)
	}
	_, _ = c.Write(flood.Bytes())
	if len(s.kept) != 20 || s.kept[19] != "a19" || s.drops[OverLines] != 80 {
		t.Fatalf("after the flood: %d kept %q, drops %v; want a0..a19 and 80 over the line rate", len(s.kept), s.kept, s.drops)
	}
	// The 80 were counted, not cut apart and handed over (a flood costs a
	// count of its newlines).
	if s.handed != 20 {
		t.Fatalf("%d lines handed to the sink, want the 20 the rate keeps", s.handed)
	}
	s.clk.Advance(time.Second)
	for i := range 15 {
		_, _ = fmt.Fprintf(c, "b%d\n", i)
	}
	if len(s.kept) != 30 || s.kept[29] != "b9" || s.drops[OverLines] != 85 {
		t.Fatalf("after a second: %q, drops %v; want b0..b9 kept, 5 more dropped", s.kept[20:], s.drops)
	}
	if s.drops.Total() != 85 {
		t.Fatalf("total %d, want 85", s.drops.Total())
	}
	// Burst 0: one second's worth.
	if b := (Limits{LinesPerSec: 7}).LineBurst(); b != 7 {
		t.Fatalf("burst of a rate of 7 without one: %v", b)
	}
}

// TestByteRate: 1 KiB a second of entries: the burst (MinByteBurst), then
// a second's refill; the room in lines is what the bytes allow for the
// shortest entries.
func TestByteRate(t *testing.T) {
	s := newLimitedSink(Limits{BytesPerSec: 1024})
	c := NewCutter(s, s.clk, 4096, time.Second)
	line := strings.Repeat("b", 1000) + "\n" // 1,017 bytes an entry
	for range 100 {
		_, _ = c.Write([]byte(line))
	}
	if want := MinByteBurst / 1017; len(s.kept) != want || s.drops[OverBytes] != int64(100-want) {
		t.Fatalf("%d kept, drops %v; want %d kept", len(s.kept), s.drops, want)
	}
	s.clk.Advance(time.Second)
	_, _ = c.Write([]byte(line + line))
	if len(s.kept) != MinByteBurst/1017+1 {
		t.Fatalf("after a second: %d kept, want one more (1 KiB of refill)", len(s.kept))
	}
	if n, why := s.Room(); why != OverBytes || n != int(s.lim.bytes.tokens)/EntryOverhead {
		t.Fatalf("room %d (%s)", n, why)
	}
}

func TestBucketClockJumps(t *testing.T) {
	b := NewBucket(10, 20, t0)
	b.Take(20)
	b.Refill(t0.Add(-time.Hour)) // back: nothing
	if b.Has(1) {
		t.Fatal("a clock that went back refilled the bucket")
	}
	b.Refill(t0.Add(time.Hour)) // far ahead: at most the burst
	if !b.Has(20) || b.Has(20.5) {
		t.Fatalf("after a jump ahead: %v tokens, want the burst (20)", b.tokens)
	}
	none := NewBucket(0, 0, t0)
	none.Take(1e9)
	if !none.Has(1e9) {
		t.Fatal("a bucket without a rate refused")
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := (Limits{LinesPerSec: 1000, Burst: 10000, BytesPerSec: 1 << 20}).Validate(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []Limits{{LinesPerSec: -1}, {Burst: math.NaN()}, {BytesPerSec: math.Inf(1)}, {LinesPerSec: 1 << 41}} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}

// FuzzCutter: whatever the writes (cut anywhere), the cutter never
// panics, no line is longer than its maximum, and with no limits every
// byte but the newlines comes out once Flush ran; with a line rate,
// every line is either kept or counted.
func FuzzCutter(f *testing.F) {
	f.Add([]byte("one\ntwo\n\nthree"), uint8(3), uint8(5))
	f.Add([]byte("ab€€€€cd\n"+strings.Repeat("x", 40)), uint8(7), uint8(4))
	f.Add(bytes.Repeat([]byte{0xe2, 0x82}, 30), uint8(1), uint8(6))
	f.Fuzz(func(t *testing.T, in []byte, split, maxLine uint8) {
		maxLen := max(int(maxLine), utf8.UTFMax)
		write := func(c *Cutter) {
			step := max(int(split), 1)
			for p := in; len(p) > 0; {
				n := min(step, len(p))
				_, _ = c.Write(p[:n])
				p = p[n:]
			}
			c.Flush()
		}
		s := newLimitedSink(Limits{})
		write(NewCutter(s, s.clk, maxLen, time.Second))
		var total int
		for _, l := range s.kept {
			if len(l) > maxLen {
				t.Fatalf("line of %d bytes, max %d", len(l), maxLen)
			}
			total += len(l)
		}
		if want := len(in) - bytes.Count(in, []byte{'\n'}); total != want {
			t.Fatalf("%d bytes came out of %d (without newlines)", total, want)
		}
		r := newLimitedSink(Limits{LinesPerSec: 1, Burst: 2})
		write(NewCutter(r, r.clk, maxLen, time.Second))
		if int64(len(r.kept))+r.drops.Total() < int64(bytes.Count(in, []byte{'\n'})) || len(r.kept) > 2 {
			t.Fatalf("%d kept, %v dropped, of %d lines at least", len(r.kept), r.drops, bytes.Count(in, []byte{'\n'}))
		}
	})
}
