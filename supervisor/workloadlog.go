package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// The workload's output goes to workload.log (contract.WorkloadLog) as one
// JSON object per line: {"t": unix ms, "s": "out" or "err", "l": the
// line} (package logs reads it). Each stream is a pipe that a goroutine
// drains without pause: a slow or failing file loses lines (counted,
// logged), it never stalls the workload.
const (
	// maxLineBytes cuts a longer line into pieces of at most this size.
	maxLineBytes = 16 << 10
	// partialAfter is how long an unfinished line (a prompt, a progress
	// bar) waits for its newline before it is written as it is.
	partialAfter = 200 * time.Millisecond
	// drainWait bounds how long the supervisor waits, as it ends, for the
	// pipes' last bytes.
	drainWait = 2 * time.Second
)

// workloadLog writes the workload's stdout and stderr to one file.
type workloadLog struct {
	mu     sync.Mutex
	w      io.Writer
	now    func() time.Time
	log    zerolog.Logger
	failed int64 // lines lost to write errors
	wg     sync.WaitGroup
	// ends are the write ends handed to the workload (closed here once it
	// has them).
	ends []*os.File
}

func newWorkloadLog(w io.Writer, log zerolog.Logger) *workloadLog {
	return &workloadLog{w: w, now: time.Now, log: log}
}

// pipe returns the write end of a new pipe for stream ("out" or "err"),
// for the workload, and starts draining its read end into the log.
func (l *workloadLog) pipe(stream string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervisor: workload %s pipe: %w (out of descriptors?)", stream, err)
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

// close waits (at most d) for the pipes to be drained.
func (l *workloadLog) close(d time.Duration) {
	l.handedOver()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		l.log.Warn().Dur("waited", d).Msg("workload output still open (a process of the sandbox outlived it); its last lines may be lost")
	}
}

// stream returns a line writer for stream.
func (l *workloadLog) stream(stream string) *lineWriter {
	return &lineWriter{sink: l, stream: stream, max: maxLineBytes, after: partialAfter}
}

// entry is one line of workload.log.
type entry struct {
	T int64  `json:"t"`
	S string `json:"s"`
	L string `json:"l"`
}

// write appends lines of stream, each stamped with the current time, in
// one write.
func (l *workloadLog) write(stream string, lines [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	t := l.now().UnixMilli()
	for _, line := range lines {
		// Invalid UTF-8 becomes U+FFFD (the line stays one JSON string).
		_ = enc.Encode(entry{T: t, S: stream, L: string(line)})
	}
	if _, err := l.w.Write(b.Bytes()); err != nil {
		l.failed += int64(len(lines))
		if l.failed == int64(len(lines)) || l.failed%1000 < int64(len(lines)) {
			l.log.Error().Err(err).Int64("lines_lost", l.failed).Msg("workload log: write failed; lines lost (is the disk full?)")
		}
	}
}

// lineWriter cuts one stream into lines: complete lines are written at
// once, a line longer than max in pieces of max bytes (cut at a rune
// boundary), an unfinished line after it waited for its end for after.
type lineWriter struct {
	sink   *workloadLog
	stream string
	max    int
	after  time.Duration

	mu    sync.Mutex
	buf   []byte    // the unfinished line
	since time.Time // when buf got its first byte
	timer *time.Timer
}

// Write takes any bytes; it never fails.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	var lines [][]byte
	for len(p) > 0 {
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
			lines = append(lines, append(append([]byte(nil), w.buf...), seg[:k]...))
			w.buf, seg = w.buf[:0], seg[k:]
		}
		if len(w.buf) == 0 && len(seg) > 0 {
			w.since = time.Now()
		}
		w.buf = append(w.buf, seg...)
		if nl {
			lines = append(lines, append([]byte(nil), w.buf...))
			w.buf = w.buf[:0]
		}
	}
	if len(lines) > 0 {
		w.sink.write(w.stream, lines)
	}
	if len(w.buf) > 0 && w.timer == nil {
		w.timer = time.AfterFunc(w.after, w.partial)
	}
	return n, nil
}

// partial writes the unfinished line once it has waited long enough.
func (w *lineWriter) partial() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	if len(w.buf) == 0 {
		return
	}
	if wait := w.after - time.Since(w.since); wait > 0 {
		w.timer = time.AfterFunc(wait, w.partial) // it started after this timer was set
		return
	}
	w.sink.write(w.stream, [][]byte{append([]byte(nil), w.buf...)})
	w.buf = w.buf[:0]
}

// flush writes the unfinished line now (the stream ended).
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if len(w.buf) > 0 {
		w.sink.write(w.stream, [][]byte{append([]byte(nil), w.buf...)})
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
