package audit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/logfile"
)

// Sink receives audit events. Implementations must be safe for concurrent
// use: every connection and query actor records into the same sink.
type Sink interface {
	Record(e Event)
}

// BatchSink is a Sink that can also record several events at once, which
// costs it less than one Record per event (File takes its lock once and
// makes at most one write for the batch). RecordBatch records the events in
// order with the guarantees Record gives each of them; it neither keeps nor
// changes the slice. Callers holding a plain Sink use RecordAll.
type BatchSink interface {
	Sink
	RecordBatch(events []Event)
}

// RecordAll records events into s: in one RecordBatch when s is a
// BatchSink, else one Record per event.
func RecordAll(s Sink, events []Event) {
	if bs, ok := s.(BatchSink); ok {
		bs.RecordBatch(events)
		return
	}
	for i := range events {
		s.Record(events[i])
	}
}

var (
	_ BatchSink = Discard{}
	_ BatchSink = Multi(nil)
	_ BatchSink = LogSink{}
	_ BatchSink = (*File)(nil)
)

// Discard drops every event.
type Discard struct{}

// Record implements Sink.
func (Discard) Record(Event) {}

// RecordBatch implements BatchSink.
func (Discard) RecordBatch([]Event) {}

// Multi fans an event out to several sinks.
type Multi []Sink

// Record implements Sink.
func (m Multi) Record(e Event) {
	for _, s := range m {
		s.Record(e)
	}
}

// RecordBatch implements BatchSink: each member gets the whole batch, in
// one RecordBatch when it is a BatchSink, else one Record per event.
func (m Multi) RecordBatch(events []Event) {
	for _, s := range m {
		RecordAll(s, events)
	}
}

// LogSink writes the one-line form of each event to a zerolog logger:
// denials at warn level, the rest at info.
type LogSink struct {
	Log zerolog.Logger
	// AllowedAtDebug logs allowed decisions at debug level: for a boundary
	// whose audit file records every decision, the log keeps the denials
	// and the lifecycle at their level, and a busy proxy does not pay a
	// formatted line and a write per allowed connection.
	AllowedAtDebug bool
	// Out, when set, is Log's destination: RecordBatch renders a batch's
	// lines into one buffer and hands them over in one call (one write(2)
	// for a JSON log) instead of one write per line. Nil: a write per line.
	Out EventsWriter
	// Bufs, when set, lends RecordBatch its render buffers (a batch's
	// buffer was a fresh, zeroed allocation: a fifth of the sink's cost).
	Bufs *Bufs
	// Denials, when set, bounds the denial lines (DenialLimit); nil logs
	// every denial (the log is then the only record).
	Denials *DenialLimit
}

// Bufs lends render buffers to the copies of a LogSink; the zero value is
// ready to use.
type Bufs struct{ p sync.Pool }

// maxLentBuf is the largest buffer taken back: a rare huge batch does not
// pin its memory.
const maxLentBuf = 64 << 10

func (b *Bufs) get() *bytes.Buffer {
	if b != nil {
		if buf, ok := b.p.Get().(*bytes.Buffer); ok {
			return buf
		}
	}
	return new(bytes.Buffer)
}

func (b *Bufs) put(buf *bytes.Buffer) {
	if b != nil && buf.Cap() <= maxLentBuf {
		buf.Reset()
		b.p.Put(buf)
	}
}

// EventsWriter takes several log events' JSON lines at once (logx.Out).
// As io.Writer's, WriteEvents must not keep p after it returns.
type EventsWriter interface{ WriteEvents(p []byte) error }

// Record implements Sink.
func (l LogSink) Record(e Event) {
	var now time.Time
	if lvl, ok := l.level(&e, &now); ok {
		l.write(l.Log, lvl, &e)
	}
}

// level is the level of e's line; false when e is not logged: a denial
// over the limit, or a level the log does not write. A denial is counted
// at *now, read from the limit's clock by the first denial of a Record or
// RecordBatch (an allowed decision reads no clock).
func (l LogSink) level(e *Event, now *time.Time) (zerolog.Level, bool) {
	lvl := zerolog.InfoLevel
	switch {
	case e.ActionID == ActionDenied:
		if l.Denials != nil {
			if now.IsZero() {
				*now = l.Denials.clock.Now()
			}
			if !l.Denials.allow(*now) {
				return lvl, false
			}
		}
		lvl = zerolog.WarnLevel
	case l.AllowedAtDebug && e.ActionID == ActionAllowed:
		lvl = zerolog.DebugLevel
	}
	return lvl, lvl >= l.Log.GetLevel() && lvl >= zerolog.GlobalLevel()
}

func (l LogSink) write(log zerolog.Logger, lvl zerolog.Level, e *Event) {
	var line [256]byte // most lines fit: one allocation, the string
	log.WithLevel(lvl).Str("component", "audit").Msg(string(e.AppendLine(line[:0])))
}

// RecordBatch implements BatchSink: one log line per event, as Record; with
// Out, the lines leave together. A batch none of whose events is logged
// (allowed ones at debug, denials over the limit) costs no logger.
func (l LogSink) RecordBatch(events []Event) {
	var now time.Time
	if l.Out == nil || len(events) < 2 {
		for i := range events {
			if lvl, ok := l.level(&events[i], &now); ok {
				l.write(l.Log, lvl, &events[i])
			}
		}
		return
	}
	var (
		buf *bytes.Buffer
		log zerolog.Logger
	)
	for i := range events {
		lvl, ok := l.level(&events[i], &now)
		if !ok {
			continue
		}
		if buf == nil {
			buf = l.Bufs.get()
			defer l.Bufs.put(buf)
			log = l.Log.Output(buf)
		}
		l.write(log, lvl, &events[i])
	}
	if buf != nil {
		// A failed write is lost as a logger's own would be: the log is
		// where it would be said. WriteEvents keeps nothing of buf.
		_ = l.Out.WriteEvents(buf.Bytes())
	}
}

// FileOption configures a File sink.
type FileOption func(*File)

// WithMaxBytes sets the size at which the file is rotated (default 64 MiB).
func WithMaxBytes(n int64) FileOption { return func(f *File) { f.maxBytes = n } }

// WithKeep sets how many rotated files are kept (default 3: FILE.1 .. FILE.3).
func WithKeep(n int) FileOption { return func(f *File) { f.keep = n } }

// WithErrorLog sets the logger that reports write failures (the sink never
// blocks or fails its callers; a failed write is logged and counted).
func WithErrorLog(l zerolog.Logger) FileOption { return func(f *File) { f.log = l } }

// WithFlushInterval sets the group-commit interval: events recorded within
// it share one write(2) (default 10 ms; 0 writes each event at once). A
// crash loses at most the allowed-decision events of the last interval: a
// denial is written (with everything buffered before it) before Record
// returns, and the boundary records before it answers, so every denial a
// client saw survives a SIGKILL of the supervisor right after.
func WithFlushInterval(d time.Duration) FileOption { return func(f *File) { f.interval = d } }

// groupBytes is the buffered size that forces a write before the interval.
const groupBytes = 64 << 10

// File writes events as JSON lines to a file, rotating by size. Writes are
// group-committed: events recorded within the flush interval share one
// write(2), so a decision costs an append to a buffer, not a syscall.
type File struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxBytes int64
	keep     int
	interval time.Duration
	buf      []byte
	timer    *time.Timer
	failed   int64
	log      zerolog.Logger
}

// OpenFile opens (appending) or creates the audit file at path, creating its
// directory with mode 0700.
func OpenFile(path string, opts ...FileOption) (*File, error) {
	af := &File{path: path, maxBytes: 64 << 20, keep: 3, interval: 10 * time.Millisecond, log: zerolog.Nop()}
	for _, o := range opts {
		o(af)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: create directory for %s: %w", path, err)
	}
	if err := af.open(); err != nil {
		return nil, err
	}
	return af, nil
}

func (af *File) open() error {
	f, size, err := logfile.OpenAppend(af.path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	af.f, af.size = f, size
	return nil
}

// Record implements Sink. The event is encoded straight into the
// group-commit buffer (AppendJSON, no allocation per event); a denial is
// written, with everything buffered before it, before Record returns.
func (af *File) Record(e Event) {
	af.mu.Lock()
	defer af.mu.Unlock()
	if !af.appendLocked(&e) {
		return
	}
	af.commitLocked(e.ActionID == ActionDenied)
}

// RecordBatch implements BatchSink: the events are appended under one lock
// and, when one of them is a denial, the batch (with everything buffered
// before it) is written in one write(2) before RecordBatch returns; a batch
// of allowed events only is written within the flush interval, as Record's.
// A batch that crosses the rotation size is written in two parts, the first
// to the file being rotated out. events is not changed.
func (af *File) RecordBatch(events []Event) {
	if len(events) == 0 {
		return
	}
	af.mu.Lock()
	defer af.mu.Unlock()
	denial, added := false, false
	for i := range events {
		if af.appendLocked(&events[i]) {
			added = true
			denial = denial || events[i].ActionID == ActionDenied
		}
	}
	if added {
		af.commitLocked(denial)
	}
}

// appendLocked encodes e as one line at the end of the buffer, rotating the
// file first when the line would take it over the size limit. It reports
// whether the line was buffered; when not, the loss has been counted.
func (af *File) appendLocked(e *Event) bool {
	if af.f == nil {
		af.failLocked(fmt.Errorf("audit: %s is closed", af.path))
		return false
	}
	start := len(af.buf)
	af.buf = append(appendEvent(af.buf, e, e.Time.UnixMilli()), '\n')
	if af.size+int64(len(af.buf)) > af.maxBytes && af.size+int64(start) > 0 {
		// The line does not fit: what was buffered before it goes to the
		// current file, the line starts the next one.
		af.writeLocked(af.buf[:start])
		af.buf = af.buf[:copy(af.buf, af.buf[start:])]
		if err := af.rotateLocked(); err != nil {
			af.buf = af.buf[:0]
			af.failLocked(err)
			return false
		}
	}
	return true
}

// commitLocked writes the buffer now when durability asks for it (a denial
// in it), when group commit is off or when the buffer is large; otherwise
// it makes sure the flush timer runs.
func (af *File) commitLocked(denial bool) {
	switch {
	case af.interval <= 0 || len(af.buf) >= groupBytes || denial:
		af.flushLocked()
	case af.timer == nil:
		af.timer = time.AfterFunc(af.interval, af.Flush)
	}
}

// Flush writes the buffered events now.
func (af *File) Flush() {
	af.mu.Lock()
	defer af.mu.Unlock()
	af.flushLocked()
}

// maxKeptBuf is the buffer capacity kept after a flush: a rare huge event
// or batch does not pin its memory for the life of the sink.
const maxKeptBuf = 4 * groupBytes

func (af *File) flushLocked() {
	if af.timer != nil {
		af.timer.Stop()
		af.timer = nil
	}
	if len(af.buf) == 0 || af.f == nil {
		return
	}
	af.writeLocked(af.buf)
	if cap(af.buf) > maxKeptBuf {
		af.buf = nil
	} else {
		af.buf = af.buf[:0]
	}
}

// writeLocked writes p to the file in one write(2), counting the bytes
// written and reporting (and counting) a failure.
func (af *File) writeLocked(p []byte) {
	if len(p) == 0 || af.f == nil {
		return
	}
	n, err := af.f.Write(p)
	af.size += int64(n)
	if err != nil {
		af.failLocked(fmt.Errorf("audit: write %s (%d bytes of events lost): %w", af.path, len(p)-n, err))
	}
}

func (af *File) rotateLocked() error {
	if err := af.f.Close(); err != nil {
		return fmt.Errorf("audit: close %s for rotation: %w", af.path, err)
	}
	af.f = nil
	if err := logfile.Shift(af.path, af.keep); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return af.open()
}

func (af *File) failLocked(err error) {
	af.failed++
	af.log.Error().Err(err).Int64("failed_total", af.failed).Msg("audit event lost")
}

// Failed returns how many write failures occurred.
func (af *File) Failed() int64 {
	af.mu.Lock()
	defer af.mu.Unlock()
	return af.failed
}

// Close flushes and closes the file; later events are counted as failed.
func (af *File) Close() error {
	af.mu.Lock()
	defer af.mu.Unlock()
	af.flushLocked()
	if af.f == nil {
		return nil
	}
	err := af.f.Close()
	af.f = nil
	if err != nil {
		return fmt.Errorf("audit: close %s: %w", af.path, err)
	}
	return nil
}
