package nsrun

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/linelimit"
)

// Init's pump (Spec.Output): the workload's stdout and stderr are pipes
// init made; a goroutine per pipe reads it without pause (64 KiB at a
// time), cuts it into lines and lets them through within the limits
// (linelimit, one Limiter for both streams); the lines let through wait,
// as frames (output.go), in a buffer of at most maxBacklog bytes that a
// writer goroutine hands to the parent's pipe; the counts of what was
// dropped follow at most every countsEvery. The reading never waits for
// the writing: when the parent falls behind, the buffer fills and lines
// are dropped as Behind. Its memory is bounded whatever the workload
// writes: per stream a read buffer (pumpRead), an unfinished line of at
// most maxLine and the slice headers of one read's lines (at most one per
// newline read); the buffer for the parent and the one being written (each
// maxBacklog and a count frame).
const (
	// maxLine cuts a longer line into pieces of at most this size.
	maxLine = 16 << 10
	// partialAfter is how long an unfinished line (a prompt, a progress
	// bar) waits for its newline before it is passed on as it is.
	partialAfter = 200 * time.Millisecond
	// maxBacklog bounds the frames waiting for the parent.
	maxBacklog = 256 << 10
	// countsEvery is the most often the counts of dropped lines are sent.
	countsEvery = 100 * time.Millisecond
	// pumpRead is what one read of a stream takes at most (a full pipe).
	pumpRead = 64 << 10
	// pumpGrace bounds, as init ends, the reading of what the workload's
	// processes left in their pipes, and then the writing to the parent.
	pumpGrace = time.Second
)

// pump is init's side of the workload's output.
type pump struct {
	clk     clock.Clock
	out     *os.File // to the parent; non-blocking, so that end can bound it
	streams []*pumpStream
	wake    chan struct{} // the writer has work (capacity 1)
	readers sync.WaitGroup
	written chan struct{} // closed when the writer is done

	mu          sync.Mutex
	lim         *linelimit.Limiter
	pending     []byte // frames for the parent
	inPending   int64  // lines in pending
	counts      linelimit.Counts
	countsAt    time.Time   // when counts were last sent
	countsTimer func() bool // armed to send counts that had to wait
	broken      bool        // a write to the parent failed: it is gone
	ending      bool        // the readers are done: write what is left and stop
}

// pumpStream is one of the workload's streams.
type pumpStream struct {
	p    *pump
	kind Stream
	r    *os.File
	cut  *linelimit.Cutter
}

// startPump starts pumping to descriptor out (the parent's pipe) and
// returns the write ends of the workload's stdout and stderr, for it to
// be given (the caller closes them once it has).
func startPump(lim linelimit.Limits, out int, clk clock.Clock) (*pump, []*os.File, error) {
	if err := lim.Validate(); err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(out, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil, nil, fmt.Errorf("output descriptor %d is not a pipe (%v)", out, err)
	}
	if err := unix.SetNonblock(out, true); err != nil {
		return nil, nil, fmt.Errorf("output descriptor %d: %w", out, err)
	}
	p := &pump{clk: clk, out: os.NewFile(uintptr(out), "nsrun-output"), wake: make(chan struct{}, 1),
		written: make(chan struct{}), lim: linelimit.NewLimiter(lim, clk.Now())}
	var ends []*os.File
	for _, kind := range []Stream{Stdout, Stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			for _, s := range p.streams {
				s.r.Close()
			}
			for _, w := range ends {
				w.Close()
			}
			p.out.Close()
			return nil, nil, fmt.Errorf("workload %s pipe: %w", kind, err)
		}
		s := &pumpStream{p: p, kind: kind, r: r}
		s.cut = linelimit.NewCutter(s, clk, maxLine, partialAfter)
		p.streams = append(p.streams, s)
		ends = append(ends, w)
	}
	for _, s := range p.streams {
		p.readers.Add(1)
		go s.read()
	}
	go p.write()
	return p, ends, nil
}

// read drains the stream until every process holding its write end is
// gone (or end's deadline), then passes on its unfinished line.
func (s *pumpStream) read() {
	defer s.p.readers.Done()
	defer s.r.Close()
	buf := make([]byte, pumpRead)
	for {
		n, err := s.r.Read(buf)
		if n > 0 {
			_, _ = s.cut.Write(buf[:n])
		}
		if err != nil {
			s.cut.Flush()
			return
		}
	}
}

// Room implements linelimit.Sink.
func (s *pumpStream) Room() (int, linelimit.Reason) {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.broken:
		return 0, linelimit.Lost
	case len(p.pending)+frameHeader+1 > maxBacklog:
		return 0, linelimit.Behind
	}
	return p.lim.Room(p.clk.Now())
}

// Lines implements linelimit.Sink: the lines the limits and the backlog
// let through become one frame.
func (s *pumpStream) Lines(lines [][]byte) {
	p := s.p
	p.mu.Lock()
	if p.broken {
		p.counts[linelimit.Lost] += int64(len(lines))
		p.mu.Unlock()
		p.signal()
		return
	}
	p.lim.Refill(p.clk.Now())
	at := len(p.pending)
	p.pending = appendHeader(p.pending, byte(s.kind))
	for _, line := range lines {
		size := len(line) + linelimit.EntryOverhead
		if why, ok := p.lim.Allows(size); !ok {
			p.counts[why]++
			continue
		}
		if len(p.pending)+len(line)+1 > maxBacklog {
			p.counts[linelimit.Behind]++
			continue
		}
		p.lim.Take(size)
		p.pending = append(append(p.pending, line...), '\n')
		p.inPending++
	}
	if len(p.pending) == at+frameHeader {
		p.pending = p.pending[:at]
	} else {
		putLength(p.pending, at)
	}
	p.mu.Unlock()
	p.signal()
}

// Drop implements linelimit.Sink.
func (s *pumpStream) Drop(n int, why linelimit.Reason) {
	p := s.p
	p.mu.Lock()
	p.counts[why] += int64(n)
	p.mu.Unlock()
	p.signal()
}

// signal wakes the writer.
func (p *pump) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// write hands the frames to the parent, with the counts at most every
// countsEvery, until end; after a failed write it only counts.
func (p *pump) write() {
	defer close(p.written)
	var spare []byte
	for {
		<-p.wake
		p.mu.Lock()
		buf, lines := p.pending, p.inPending
		p.pending, p.inPending = spare[:0], 0
		var sent linelimit.Counts
		if p.counts.Total() > 0 && !p.broken {
			now := p.clk.Now()
			switch wait := countsEvery - now.Sub(p.countsAt); {
			case p.ending || wait <= 0 || wait > countsEvery: // due, or the clock went back
				buf = appendCounts(buf, p.counts)
				sent, p.counts, p.countsAt = p.counts, linelimit.Counts{}, now
			case p.countsTimer == nil:
				p.countsTimer = p.clk.AfterFunc(wait, p.countsDue)
			}
		}
		broken, done := p.broken, p.ending
		p.mu.Unlock()
		var err error
		if len(buf) > 0 && !broken {
			_, err = p.out.Write(buf)
		}
		if err != nil || (broken && lines > 0) {
			// The parent is gone: nobody to tell, but counted all the same.
			p.mu.Lock()
			p.broken = true
			p.counts[linelimit.Lost] += lines
			p.counts.Add(sent)
			p.mu.Unlock()
		}
		spare = buf[:0]
		if cap(spare) > 2*maxBacklog { // counts on a full buffer: once
			spare = nil
		}
		if done {
			return
		}
	}
}

// countsDue is the timer of counts that had to wait.
func (p *pump) countsDue() {
	p.mu.Lock()
	p.countsTimer = nil
	p.mu.Unlock()
	p.signal()
}

// end passes on what is left, within grace for the reading and again for
// the writing: the streams are read until every process of the sandbox
// holding them is gone (the caller has killed them) and their unfinished
// lines are passed on, then the writer writes the frames and the last
// counts and closes the parent's pipe.
func (p *pump) end(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for _, s := range p.streams {
		_ = s.r.SetReadDeadline(deadline)
	}
	p.readers.Wait()
	p.mu.Lock()
	p.ending = true
	if p.countsTimer != nil {
		p.countsTimer()
		p.countsTimer = nil
	}
	p.mu.Unlock()
	_ = p.out.SetWriteDeadline(time.Now().Add(grace))
	p.signal()
	<-p.written
	_ = p.out.Close()
}
