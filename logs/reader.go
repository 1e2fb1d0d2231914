package logs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/contract"
)

// Sources of an entry (Entry.Source, the JSON key "source").
const (
	SourceWorkload  = "workload"
	SourceAudit     = "audit"
	SourceLifecycle = "lifecycle"
)

// Streams of a workload entry (Entry.Stream).
const (
	StreamOut = "out"
	StreamErr = "err"
)

// Limits of what one entry carries.
const (
	// MaxText bounds an entry's text (longer is cut at a rune boundary).
	MaxText = 64 << 10
	// MaxEvent bounds an audit event kept with its entry (a larger one is
	// left out; its text stays).
	MaxEvent = 64 << 10
	// MaxTail bounds Options.Tail (the positions of that many entries per
	// source are held while the tail is found).
	MaxTail = 100_000
	// maxLine bounds a line in a file: a longer one is skipped (the
	// supervisor writes at most 16 KiB of workload output per line).
	maxLine = 256 << 10
	// chunk is the size of one read.
	chunk = 64 << 10
)

// Entry is one line of a sandbox's logs.
type Entry struct {
	Time time.Time
	// Source is SourceWorkload, SourceAudit or SourceLifecycle.
	Source string
	// Stream is StreamOut or StreamErr for the workload, "" otherwise.
	Stream string
	// Text is the workload's line, or the audit event's one-line form
	// (audit.Event.Line).
	Text string
	// Event is the audit or lifecycle event as recorded (JSON), nil for
	// the workload.
	Event json.RawMessage
}

// size approximates what the entry costs in a message.
func (e *Entry) size() int { return len(e.Text) + len(e.Event) + 48 }

// Options select what a Reader returns.
type Options struct {
	// AuditOnly leaves out the workload's output.
	AuditOnly bool
	// Since leaves out entries older than this (zero: none).
	Since time.Time
	// Tail, when positive, starts at the last Tail entries of the merged
	// sources (at most MaxTail).
	Tail int
	// Follow keeps reading what is appended after Open (Next never
	// reports the end); without it the Reader ends at what the files held
	// at Open.
	Follow bool
}

// Reader merges the log sources of one log directory in time order. It is
// not safe for concurrent use.
type Reader struct {
	srcs   []*source
	follow bool
	buf    []byte // one read's worth, shared by the sources
}

// Open opens the sources of dir and positions them per o. Missing files
// are empty sources (a follow picks them up once they appear).
func Open(dir string, o Options) (*Reader, error) {
	if o.Tail < 0 || o.Tail > MaxTail {
		return nil, fmt.Errorf("logs: tail %d: use 0 (all) to %d", o.Tail, MaxTail)
	}
	r := &Reader{follow: o.Follow, buf: make([]byte, chunk)}
	kinds := []struct{ source, file string }{{SourceWorkload, contract.WorkloadLog}, {SourceAudit, contract.AuditLog}, {SourceLifecycle, contract.LifecycleLog}}
	for _, k := range kinds {
		if o.AuditOnly && k.source == SourceWorkload {
			continue
		}
		s, err := openSource(filepath.Join(dir, k.file), k.source, o.Since, o.Follow)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.srcs = append(r.srcs, s)
	}
	var err error
	switch {
	case o.Tail > 0:
		err = r.seekTail(o.Tail, o.Since)
	case !o.Since.IsZero():
		for _, s := range r.srcs {
			if err = s.seekSince(r.buf, o.Since); err != nil {
				break
			}
		}
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	if o.Follow {
		for _, s := range r.srcs {
			s.live().end = -1
		}
	}
	return r, nil
}

// Close closes the files.
func (r *Reader) Close() {
	for _, s := range r.srcs {
		s.close()
	}
}

// Next returns the next entries in time order, at most maxEntries of
// them and about maxBytes (at least one entry when one is ready). Without
// Follow, done reports that every source has been read to where it ended
// at Open; with Follow it is always false, and no entries means nothing
// new yet: call again later.
func (r *Reader) Next(maxEntries, maxBytes int) (out []Entry, done bool, err error) {
	dry := make([]bool, len(r.srcs)) // nothing more ready in this call
	size := 0
	for len(out) < maxEntries && (len(out) == 0 || size < maxBytes) {
		best := -1
		for i, s := range r.srcs {
			if s.head == nil && !dry[i] {
				if s.head, err = s.next(r.buf); err != nil {
					return out, false, err
				}
				dry[i] = s.head == nil
			}
			if s.head != nil && (best < 0 || s.head.Time.Before(r.srcs[best].head.Time)) {
				best = i
			}
		}
		if best < 0 {
			return out, !r.follow, nil
		}
		out = append(out, *r.srcs[best].head)
		size += r.srcs[best].head.size()
		r.srcs[best].head = nil
	}
	return out, false, nil
}

// mark is where one entry of a source starts.
type mark struct {
	t   time.Time
	seg int
	off int64
}

// seekTail positions every source so that reading forward yields the last
// n entries of the merged sources (and what is appended later).
func (r *Reader) seekTail(n int, since time.Time) error {
	lists := make([][]mark, len(r.srcs)) // oldest first
	for i, s := range r.srcs {
		var ms []mark
		end, err := s.scanBack(r.buf, func(e *Entry, seg int, off int64) bool {
			if !since.IsZero() && e.Time.Before(since) {
				return false // older lines are older still
			}
			ms = append(ms, mark{e.Time, seg, off})
			return len(ms) < n
		})
		if err != nil {
			return err
		}
		for a, b := 0, len(ms)-1; a < b; a, b = a+1, b-1 {
			ms[a], ms[b] = ms[b], ms[a]
		}
		lists[i] = ms
		s.seekEnd(end)
	}
	// Merge as Next does (earliest first, ties to the earlier source) and
	// skip all but the last n: each source's share is a suffix of its list.
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	heads := make([]int, len(lists))
	for k := 0; k < total-n; k++ {
		best := -1
		for i, l := range lists {
			if heads[i] < len(l) && (best < 0 || l[heads[i]].t.Before(lists[best][heads[best]].t)) {
				best = i
			}
		}
		heads[best]++
	}
	for i, l := range lists {
		if heads[i] < len(l) {
			r.srcs[i].seek(l[heads[i]].seg, l[heads[i]].off)
		}
	}
	return nil
}

// source is one log of a directory: its rotated files (oldest first) and
// the live file last.
type source struct {
	path   string
	kind   string
	since  time.Time
	follow bool
	segs   []*segment
	cur    int    // the segment being read
	head   *Entry // read, not yet returned
	// rotated: the live file was replaced; the old one is read to its end
	// once more before the new one is opened.
	rotated bool
}

// segment is one file of a source.
type segment struct {
	f     *os.File // nil: not there (yet)
	ino   uint64
	mtime time.Time // at open: the time of lines in the old plain form
	// form of a workload file: WorkloadHeader's (formCurrent) or an
	// earlier supervisor's (formLegacy); formUnknown until its first line
	// is complete.
	form int8
	pos  int64  // the next byte to read into buf
	end  int64  // read no further (-1: no limit)
	buf  []byte // read, not yet a line
	skip bool   // dropping the rest of an over-long line
}

func openSource(path, kind string, since time.Time, follow bool) (*source, error) {
	s := &source{path: path, kind: kind, since: since, follow: follow}
	olds, err := openRotated(path)
	if err != nil {
		return nil, err
	}
	s.segs = olds
	g, err := openSegment(path)
	if err != nil {
		s.close()
		return nil, err
	}
	s.segs = append(s.segs, g)
	return s, nil
}

// rotatedPaths lists the rotated files of path (audit.File and the supervisor's
// workload log rotate FILE to FILE.1 .. FILE.N, FILE.1 the newest), oldest
// first.
func rotatedPaths(path string) []string {
	olds, _ := filepath.Glob(path + ".*")
	type rot struct {
		n    int
		path string
	}
	var rots []rot
	for _, p := range olds {
		if n, err := strconv.Atoi(strings.TrimPrefix(p, path+".")); err == nil && n > 0 {
			rots = append(rots, rot{n, p})
		}
	}
	sort.Slice(rots, func(i, j int) bool { return rots[i].n > rots[j].n })
	out := make([]string, len(rots))
	for i, r := range rots {
		out[i] = r.path
	}
	return out
}

// openRotated opens the rotated files of path, oldest first (one that is
// gone by then is left out).
func openRotated(path string) ([]*segment, error) {
	var segs []*segment
	for _, p := range rotatedPaths(path) {
		g, err := openSegment(p)
		if err != nil {
			for _, g := range segs {
				_ = g.f.Close()
			}
			return nil, err
		}
		if g.f != nil {
			segs = append(segs, g)
		}
	}
	return segs, nil
}

func openSegment(path string) (*segment, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &segment{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("logs: open %s: %w (the gateway reads its sandboxes' log directories: check their owner and mode)", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("logs: stat %s: %w", path, err)
	}
	return &segment{f: f, end: st.Size(), mtime: st.ModTime(), ino: inode(st)}, nil
}

func (s *source) close() {
	for _, g := range s.segs {
		if g.f != nil {
			_ = g.f.Close()
		}
	}
}

func (s *source) live() *segment { return s.segs[len(s.segs)-1] }

// seek starts reading at offset off of segment seg (and the later
// segments from their start).
func (s *source) seek(seg int, off int64) {
	s.cur = seg
	for i := seg; i < len(s.segs); i++ {
		g := s.segs[i]
		g.pos, g.buf, g.skip = 0, nil, false
		if i == seg {
			g.pos = off
		}
	}
}

// seekEnd starts reading at offset end of the live file (after its last
// complete line).
func (s *source) seekEnd(end int64) { s.seek(len(s.segs)-1, end) }

// seekSince starts at the first entry not older than since, found from
// the end (entries are appended in time order).
func (s *source) seekSince(buf []byte, since time.Time) error {
	var first *mark
	end, err := s.scanBack(buf, func(e *Entry, seg int, off int64) bool {
		if e.Time.Before(since) {
			return false
		}
		first = &mark{e.Time, seg, off}
		return true
	})
	if err != nil {
		return err
	}
	if first == nil {
		s.seekEnd(end)
		return nil
	}
	s.seek(first.seg, first.off)
	return nil
}

// next returns the source's next entry, or nil when none is ready.
func (s *source) next(buf []byte) (*Entry, error) {
	for {
		g := s.segs[s.cur]
		line, ok, err := g.line(buf)
		if err != nil {
			return nil, fmt.Errorf("logs: read %s: %w", s.path, err)
		}
		if !ok {
			switch {
			case s.cur < len(s.segs)-1:
				// Read to its end: closed (a long follow passes many
				// rotations).
				if g.f != nil {
					_ = g.f.Close()
				}
				s.segs = append(s.segs[:s.cur], s.segs[s.cur+1:]...)
				continue
			case !s.follow:
				return nil, nil
			case s.rotated:
				if err := s.reopen(); err != nil {
					return nil, err
				}
				continue
			}
			if changed, err := s.checkLive(); err != nil || !changed {
				return nil, err
			}
			continue
		}
		e, ok := s.parse(line, g)
		if !ok || (!s.since.IsZero() && e.Time.Before(s.since)) {
			continue
		}
		return e, nil
	}
}

// checkLive looks at the live file's path: a file that appeared, or that
// was rotated or truncated, is read (again) from its start. It reports
// whether there may be something new to read.
func (s *source) checkLive() (bool, error) {
	g := s.live()
	if g.f == nil {
		ng, err := openSegment(s.path)
		if err != nil || ng.f == nil {
			return false, err
		}
		ng.pos, ng.end = 0, -1
		s.segs[len(s.segs)-1] = ng
		return true, nil
	}
	st, err := os.Stat(s.path)
	if err != nil {
		return false, nil // rotation in progress, or the directory is gone (deleted)
	}
	if inode(st) != g.ino {
		// Rotated: what was written to the old file before the rename is
		// read first (the next call), then the new file.
		s.rotated = true
		return true, nil
	}
	if consumed := g.pos - int64(len(g.buf)); st.Size() < consumed {
		g.pos, g.buf, g.skip, g.form = 0, nil, false, formUnknown // truncated
		return true, nil
	}
	return false, nil
}

// reopen moves on from a rotated live file (read to its end) to the
// rotated files made after it, when it was rotated more than once since
// the last look, and then to the file now at its path.
func (s *source) reopen() error {
	s.rotated = false
	old := s.live()
	newer, err := s.rotatedAfter(old.ino)
	if err != nil {
		return err
	}
	ng, err := openSegment(s.path)
	if err != nil {
		closeSegments(newer)
		return err
	}
	ng.pos, ng.end = 0, -1
	if old.f != nil {
		_ = old.f.Close()
	}
	s.segs = append(append(s.segs[:len(s.segs)-1], newer...), ng)
	return nil
}

// rotatedAfter opens the rotated files of the source newer than the file
// with inode ino (all of them when it is gone: it was the newest of its
// time, so whatever is left came after it). A rotation while they are
// listed is seen (a file is not where it was listed) and listed again.
func (s *source) rotatedAfter(ino uint64) ([]*segment, error) {
	for attempt := 0; ; attempt++ {
		segs, err := openRotated(s.path)
		if err != nil {
			return nil, err
		}
		moved := false
		for _, g := range segs {
			if st, err := os.Stat(g.f.Name()); err != nil || inode(st) != g.ino {
				moved = true
			}
		}
		if moved && attempt < 3 {
			closeSegments(segs)
			continue
		}
		for i, g := range segs {
			if g.ino == ino {
				closeSegments(segs[:i+1])
				segs = segs[i+1:]
				break
			}
		}
		return segs, nil
	}
}

func closeSegments(segs []*segment) {
	for _, g := range segs {
		if g.f != nil {
			_ = g.f.Close()
		}
	}
}

func inode(st os.FileInfo) uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ino
	}
	return 0
}

// Forms of a workload file (segment.form).
const (
	formUnknown int8 = iota
	formCurrent
	formLegacy
)

// formOf reads (once) whether the segment starts with WorkloadHeader. It
// is asked with a complete line in hand, so the file holds a newline:
// a file whose first bytes are not the header is an earlier supervisor's
// (the supervisor makes its files with the header in them).
func (g *segment) formOf() int8 {
	if g.form != formUnknown {
		return g.form
	}
	var b [len(WorkloadHeader)]byte
	n, err := g.f.ReadAt(b[:], 0)
	switch {
	case n == len(b) && string(b[:]) == WorkloadHeader:
		g.form = formCurrent
	case n == len(b) || bytes.IndexByte(b[:n], '\n') >= 0:
		g.form = formLegacy
	case err != nil && err != io.EOF:
		return formLegacy // this once: a later line asks again
	default:
		return formLegacy // no complete line in the file: none asks
	}
	return g.form
}

// line returns the segment's next complete line (without its newline);
// ok is false when none is complete within its end. The line is valid
// until the next call.
func (g *segment) line(buf []byte) ([]byte, bool, error) {
	if g.f == nil {
		return nil, false, nil
	}
	for {
		if i := bytes.IndexByte(g.buf, '\n'); i >= 0 {
			l := g.buf[:i]
			g.buf = g.buf[i+1:]
			if g.skip {
				g.skip = false
				continue
			}
			return l, true, nil
		}
		if len(g.buf) > maxLine {
			g.buf, g.skip = nil, true
		}
		n := len(buf)
		if g.end >= 0 && g.end-g.pos < int64(n) {
			n = int(g.end - g.pos)
		}
		if n <= 0 {
			return nil, false, nil
		}
		k, err := g.f.ReadAt(buf[:n], g.pos)
		if k > 0 {
			g.pos += int64(k)
			g.buf = append(g.buf, buf[:k]...)
		}
		if err != nil && err != io.EOF {
			return nil, false, err
		}
		if k == 0 {
			return nil, false, nil
		}
	}
}

// scanBack calls fn with each entry of the source from the last complete
// line backwards (through the rotated files), with where its line starts,
// until fn returns false. It returns the end of the live file's last
// complete line (as of Open).
func (s *source) scanBack(buf []byte, fn func(e *Entry, seg int, off int64) bool) (int64, error) {
	var liveEnd int64
	for i := len(s.segs) - 1; i >= 0; i-- {
		g := s.segs[i]
		if g.f == nil {
			continue
		}
		more, end, err := g.scanBack(buf, func(line []byte, off int64) bool {
			e, ok := s.parse(line, g)
			return !ok || fn(e, i, off)
		})
		if i == len(s.segs)-1 {
			liveEnd = end
		}
		if err != nil {
			return 0, fmt.Errorf("logs: read %s: %w", s.path, err)
		}
		if !more {
			break
		}
	}
	return liveEnd, nil
}

// scanBack calls fn with each complete line of the segment up to its end,
// last first, and where it starts, until fn returns false (more is then
// false). end is where the last complete line ends.
func (g *segment) scanBack(buf []byte, fn func(line []byte, off int64) bool) (more bool, end int64, err error) {
	pos := g.end
	last := true // the bytes after the last newline are no complete line
	skip := false
	var tail []byte // the end of a line whose start is before pos
	for pos > 0 {
		n := int64(len(buf))
		if pos < n {
			n = pos
		}
		pos -= n
		if _, err := g.f.ReadAt(buf[:n], pos); err != nil && err != io.EOF {
			return false, 0, err
		}
		data := append(buf[:n:n], tail...)
		j := len(data)
		for {
			i := bytes.LastIndexByte(data[:j], '\n')
			if i < 0 {
				break
			}
			switch {
			case last:
				last, end = false, pos+int64(i)+1
			case skip:
				skip = false
			default:
				if !fn(data[i+1:j], pos+int64(i)+1) {
					return false, end, nil
				}
			}
			j = i
		}
		tail = append(tail[:0:0], data[:j]...)
		if len(tail) > maxLine {
			tail, skip = nil, true // an over-long line: not shown
		}
	}
	if !last && !skip && !fn(tail, 0) {
		return false, end, nil
	}
	return true, end, nil
}

// parse turns a line of the source into an entry; ok is false for a line
// that is none (empty, or not an event).
func (s *source) parse(line []byte, g *segment) (*Entry, bool) {
	if len(line) == 0 {
		return nil, false
	}
	if s.kind == SourceWorkload {
		if g.formOf() == formCurrent {
			return parseWorkload(line)
		}
		return parseLegacyWorkload(line, g.mtime), true
	}
	var ev audit.Event
	if json.Unmarshal(line, &ev) != nil || ev.TimeMs == 0 {
		return nil, false
	}
	e := &Entry{Time: time.UnixMilli(ev.TimeMs), Source: s.kind, Text: clip(ev.Line())}
	if len(line) <= MaxEvent {
		e.Event = append(json.RawMessage(nil), line...)
	}
	return e, true
}

// clip cuts s to MaxText bytes at a rune boundary.
func clip(s string) string {
	if len(s) <= MaxText {
		return s
	}
	n := MaxText
	for n > MaxText-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
