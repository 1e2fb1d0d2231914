package nsrun

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/linelimit"
)

// Output has init take the workload's stdout and stderr (Spec.Output):
// init, inside the sandbox's cgroup, drains them without pause, cuts them
// into lines, lets lines through within Limits (package linelimit) and
// passes what it let through, with the counts of what it dropped, to Sink.
// A flood is then paid for by the sandbox: what reaches the parent is
// bounded by the limits (and by what the parent reads: init keeps at most
// maxBacklog bytes for it, and drops the rest as linelimit.Behind).
type Output struct {
	Limits linelimit.Limits
	Sink   OutputSink
}

// OutputSink takes the workload's output from init, on one goroutine of
// the Sandbox, in the order init sent it. Its methods must not keep the
// slices they are given; while one runs, init buffers (and then drops).
type OutputSink interface {
	// Lines are complete lines (without their newlines) of one stream,
	// each at most 16 KiB.
	Lines(s Stream, lines [][]byte)
	// Dropped are lines init dropped since its last report (at most ten
	// reports a second, and one as it ends).
	Dropped(c linelimit.Counts)
}

// Stream names the workload's stdout or stderr.
type Stream byte

// Streams (their frame kinds).
const (
	Stdout Stream = 'o'
	Stderr Stream = 'e'
)

// String is "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("Stream(%d)", byte(s))
}

// Init writes the output to the parent as frames on a pipe of its own
// (fdOutput; neither the workload nor any other process of the sandbox
// holds it): a kind byte, the payload's length (uint32, big-endian), the
// payload. Kinds:
//
//   - Stdout, Stderr: lines of that stream, each ending in a newline
//     (lines never hold one);
//   - frameDropped: linelimit.NumReasons counts (int64, big-endian, none
//     negative), the lines dropped since the last such frame.
//
// The workload's bytes are only ever inside a line's payload: it cannot
// forge a count, a frame or the other stream.
const (
	frameDropped = 'd'
	frameHeader  = 5
	// maxFrame bounds a frame: init never has more waiting for the
	// parent (maxBacklog).
	maxFrame = maxBacklog
	// maxCount bounds one count of a frameDropped (about 35 years of
	// lines at a billion a second).
	maxCount = 1 << 60
	// countsSize is the payload of a frameDropped.
	countsSize = 8 * int(linelimit.NumReasons)
)

// appendHeader appends a frame's header (its length patched in later
// with putLength).
func appendHeader(b []byte, kind byte) []byte { return append(b, kind, 0, 0, 0, 0) }

// putLength sets the length of the frame whose header starts at b[at].
func putLength(b []byte, at int) {
	binary.BigEndian.PutUint32(b[at+1:], uint32(len(b)-at-frameHeader))
}

// appendCounts appends a frameDropped.
func appendCounts(b []byte, c linelimit.Counts) []byte {
	at := len(b)
	b = appendHeader(b, frameDropped)
	for _, n := range c {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	putLength(b, at)
	return b
}

// errFrame: the output pipe does not hold frames as init writes them.
var errFrame = errors.New("malformed output frame")

// readFrames reads frames from r until its end and hands them to sink. A
// malformed frame (init never writes one) is an error wrapping errFrame;
// what follows it is not read. A frame cut short by the end (init could
// not pass on all it had within its grace as it ended) is an error
// wrapping io.ErrUnexpectedEOF.
func readFrames(r io.Reader, sink OutputSink) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [frameHeader]byte
	var buf []byte
	var lines [][]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("output: last frame: %w", err)
		}
		kind, n := hdr[0], binary.BigEndian.Uint32(hdr[1:])
		if n > maxFrame {
			return fmt.Errorf("output: %w: %d bytes, more than %d", errFrame, n, maxFrame)
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		p := buf[:n]
		if _, err := io.ReadFull(br, p); err != nil {
			return fmt.Errorf("output: last frame: %w", err)
		}
		switch kind {
		case byte(Stdout), byte(Stderr):
			if n == 0 || p[n-1] != '\n' {
				return fmt.Errorf("output: %w: lines of %s not ending in a newline", errFrame, Stream(kind))
			}
			lines = lines[:0]
			for len(p) > 0 {
				i := bytes.IndexByte(p, '\n')
				lines = append(lines, p[:i])
				p = p[i+1:]
			}
			sink.Lines(Stream(kind), lines)
			clear(lines)
		case frameDropped:
			if int(n) != countsSize {
				return fmt.Errorf("output: %w: counts of %d bytes, want %d", errFrame, n, countsSize)
			}
			var c linelimit.Counts
			for i := range c {
				v := binary.BigEndian.Uint64(p[8*i:])
				if v > maxCount {
					return fmt.Errorf("output: %w: count %d of %s", errFrame, v, linelimit.Reason(i))
				}
				c[i] = int64(v)
			}
			sink.Dropped(c)
		default:
			return fmt.Errorf("output: %w: kind %#x", errFrame, kind)
		}
	}
}

// readOutput reads init's output frames until init is gone. After a
// malformed frame it says so and reads the rest without looking, so that
// init never waits for it.
func (s *Sandbox) readOutput(r io.ReadCloser, sink OutputSink, log zerolog.Logger) {
	defer close(s.outputDone)
	defer r.Close()
	switch err := readFrames(r, sink); {
	case errors.Is(err, io.ErrUnexpectedEOF):
		log.Warn().Err(err).Msg("the workload's last output from init was cut short as init ended")
	case err != nil:
		log.Error().Err(err).Msg("the workload's output from init is unreadable; the rest of it is discarded (a bug in init)")
		_, _ = io.Copy(io.Discard, r)
	}
}
