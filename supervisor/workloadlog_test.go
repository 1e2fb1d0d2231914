package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/logs"
)

// t0 is the fake clock's start.
var t0 = time.UnixMilli(1_700_000_000_123)

// memFile is a file that records writes (or fails them).
type memFile struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
	fail   bool
}

func (m *memFile) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes++
	if m.fail {
		return 0, errors.New("no space left on device")
	}
	return m.b.Write(p)
}

func (m *memFile) Close() error { return nil }

// countingFile counts the write(2)s to a real file.
type countingFile struct {
	*os.File
	writes int
}

func (c *countingFile) Write(p []byte) (int, error) {
	c.writes++
	return c.File.Write(p)
}

// testLog is a workload log in a temp dir, on a fake clock.
type testLog struct {
	t   *testing.T
	dir string
	clk *clock.Fake
	l   *workloadLog
}

func newTestLog(t *testing.T, lim logLimits) *testLog {
	t.Helper()
	dir := t.TempDir()
	f, err := openLogFile(filepath.Join(dir, contract.WorkloadLog), lim.maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	tl := &testLog{t: t, dir: dir, clk: clk, l: newWorkloadLog(f, lim, clk, zerolog.Nop())}
	t.Cleanup(func() { tl.l.close(time.Second) })
	return tl
}

// read is what `sandbox logs` shows of the workload: "stream:text" per
// entry (package logs reads the files).
func (tl *testLog) read() []string {
	tl.t.Helper()
	var out []string
	for _, e := range tl.entries() {
		out = append(out, e.Stream+":"+e.Text)
	}
	return out
}

func (tl *testLog) entries() []logs.Entry {
	tl.t.Helper()
	r, err := logs.Open(tl.dir, logs.Options{})
	if err != nil {
		tl.t.Fatal(err)
	}
	defer r.Close()
	var out []logs.Entry
	for {
		es, done, err := r.Next(1000, 1<<20)
		if err != nil {
			tl.t.Fatal(err)
		}
		for _, e := range es {
			if e.Source == logs.SourceWorkload {
				out = append(out, e)
			}
		}
		if done {
			return out
		}
	}
}

// onDisk is the sizes of workload.log and its rotated files, by name.
func (tl *testLog) onDisk() (map[string]int64, int64) {
	tl.t.Helper()
	ps, _ := filepath.Glob(filepath.Join(tl.dir, contract.WorkloadLog+"*"))
	sizes, total := map[string]int64{}, int64(0)
	for _, p := range ps {
		st, err := os.Stat(p)
		if err != nil {
			tl.t.Fatal(err)
		}
		sizes[filepath.Base(p)] = st.Size()
		total += st.Size()
	}
	return sizes, total
}

func TestLineWriterSplitsStreamsAndLines(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	cf := &countingFile{File: tl.l.file.f.(*os.File)}
	tl.l.file.f = cf
	out, errw := tl.l.stream(logs.WorkloadOut), tl.l.stream(logs.WorkloadErr)
	_, _ = out.Write([]byte("one\ntw"))
	_, _ = errw.Write([]byte("bad <&> \xff\n"))
	_, _ = out.Write([]byte("o\n\nthree\n"))
	got := tl.read()
	want := []string{"out:one", "err:bad <&> \uFFFD", "out:two", "out:", "out:three"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, e := range tl.entries() {
		if !e.Time.Equal(t0.Truncate(time.Millisecond)) {
			t.Fatalf("time %s, want %s", e.Time, t0)
		}
	}
	// Each Write's complete lines share one write(2).
	if cf.writes != 3 {
		t.Fatalf("%d writes, want 3", cf.writes)
	}
	// A line of "y" costs its prefix: 18 bytes, not the 38 of a JSON object.
	before := tl.l.file.size
	_, _ = out.Write([]byte("y\n"))
	if grew := tl.l.file.size - before; grew != 18 {
		t.Fatalf("a line of y took %d bytes on disk, want 18", grew)
	}
}

func TestLineWriterCapsLongLines(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	w := tl.l.stream(logs.WorkloadOut)
	w.max = 8
	// 20 bytes of ASCII, then runes of 3 bytes that must not be cut.
	_, _ = w.Write([]byte(strings.Repeat("a", 20) + "\n"))
	_, _ = w.Write([]byte("ab€€€€cd\n")) // 2 + 12 + 2 bytes
	_, _ = w.Write([]byte("1234567"))    // then 1 more byte of this line and a newline
	_, _ = w.Write([]byte("8\n"))
	got := tl.read()
	want := []string{"out:aaaaaaaa", "out:aaaaaaaa", "out:aaaa", "out:ab€€", "out:€€cd", "out:12345678"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, e := range tl.entries() {
		if !utf8.ValidString(e.Text) || len(e.Text) > 8 {
			t.Fatalf("piece %q", e.Text)
		}
	}
}

func TestLineWriterFlushesAPartialLineAfterAWhile(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	w := tl.l.stream(logs.WorkloadOut)
	_, _ = w.Write([]byte("Password: "))
	tl.clk.Advance(partialAfter - time.Millisecond)
	if got := tl.read(); len(got) != 0 {
		t.Fatalf("a partial line was written before it waited %s: %q", partialAfter, got)
	}
	tl.clk.Advance(time.Millisecond)
	if got := tl.read(); len(got) != 1 || got[0] != "out:Password: " {
		t.Fatalf("partial line %q after %s", got, partialAfter)
	}
	// Its end arrives later: a line of its own.
	_, _ = w.Write([]byte("hunter2\n"))
	if got := tl.read(); len(got) != 2 || got[1] != "out:hunter2" {
		t.Fatalf("got %q", got)
	}
}

func TestPipeDrainsAndNeverBlocksTheWorkload(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	l := tl.l
	out, err := l.pipe(logs.WorkloadOut)
	if err != nil {
		t.Fatal(err)
	}
	errw, err := l.pipe(logs.WorkloadErr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("to out\nunfinished")); err != nil {
		t.Fatal(err)
	}
	if _, err := errw.Write([]byte("to err\n")); err != nil {
		t.Fatal(err)
	}
	l.close(5 * time.Second) // closes the write ends: the pipes end, the partial line is written
	got := tl.read()
	sort.Strings(got) // the two pipes are drained side by side
	if strings.Join(got, "|") != "err:to err|out:to out|out:unfinished" {
		t.Fatalf("got %q", got)
	}

	// A file that fails every write, a log that keeps 10 lines a second,
	// one that writes 1 KiB a second: the workload's writes still finish
	// (64 MiB, far more than a pipe holds), every line not kept is counted
	// dropped.
	for _, tc := range []struct {
		name string
		lim  logLimits
		fail bool
		kept int64 // the fake clock does not move: the bursts
	}{{"failing file", logLimits{}, true, 0}, {"line rate", logLimits{lines: 10, burst: 10}, false, 10},
		{"write rate", logLimits{bps: 1024}, false, minByteBurst / 1040}} {
		t.Run(tc.name, func(t *testing.T) {
			tl := newTestLog(t, tc.lim)
			l := tl.l
			if tc.fail {
				l.file.f = &memFile{fail: true}
			}
			w, err := l.pipe(logs.WorkloadOut)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				chunk := []byte(strings.Repeat("x", 1023) + "\n")
				for i := 0; i < 64<<10; i++ {
					if _, err := w.Write(chunk); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the workload's writes blocked")
			}
			l.close(5 * time.Second)
			if !tc.fail {
				if n := int64(len(tl.entries())); n != tc.kept+1 {
					t.Fatalf("%d entries, want the burst's %d lines and a marker", n, tc.kept)
				}
			}
			if _, dropped := l.stats(); dropped != 64<<10-tc.kept {
				t.Fatalf("%d lines counted dropped, want %d", dropped, 64<<10-tc.kept)
			}
		})
	}
}

// TestLogStaysUnderItsCap: 1 MiB of output into a log capped at 256 KiB:
// after every write the files together stay under the cap, each under its
// quarter; workload.log and three rotated files, each with the header;
// the log reads back as the newest lines, in order, none missing between
// the first kept and the last written; the bytes reported are the bytes
// on disk.
func TestLogStaysUnderItsCap(t *testing.T) {
	const capBytes = 256 << 10
	tl := newTestLog(t, logLimits{maxBytes: capBytes})
	w := tl.l.stream(logs.WorkloadOut)
	const n = 10000
	for i := range n {
		_, _ = w.Write(fmt.Appendf(nil, "line %06d %s\n", i, strings.Repeat("z", 80)))
		if i%97 == 0 || i == n-1 {
			sizes, total := tl.onDisk()
			if total > capBytes {
				t.Fatalf("after line %d: %d bytes on disk, over the cap %d: %v", i, total, capBytes, sizes)
			}
			for name, s := range sizes {
				if s > capBytes/4 {
					t.Fatalf("after line %d: %s has %d bytes, over its share %d", i, name, s, capBytes/4)
				}
			}
			if reported, _ := tl.l.stats(); reported != total {
				t.Fatalf("after line %d: %d bytes reported, %d on disk", i, reported, total)
			}
		}
	}
	sizes, total := tl.onDisk()
	want := []string{"workload.log", "workload.log.1", "workload.log.2", "workload.log.3"}
	var names []string
	for name := range sizes {
		names = append(names, name)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != strings.Join(want, " ") || total < capBytes*3/4 {
		t.Fatalf("files %v (%d bytes), want %v filling most of %d", sizes, total, want, capBytes)
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(tl.dir, name))
		if err != nil || !bytes.HasPrefix(b, []byte(logs.WorkloadHeader)) {
			t.Fatalf("%s does not start with the header (%v)", name, err)
		}
	}
	got := tl.read()
	first := 0
	if _, err := fmt.Sscanf(got[0], "out:line %d", &first); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if !strings.HasPrefix(g, fmt.Sprintf("out:line %06d ", first+i)) {
			t.Fatalf("entry %d is %q, want line %d (the lines in order, none missing)", i, g, first+i)
		}
	}
	if last := first + len(got) - 1; last != n-1 || first == 0 {
		t.Fatalf("lines %d..%d kept, want the newest ending at %d", first, last, n-1)
	}
	if _, dropped := tl.l.stats(); dropped != 0 {
		t.Fatalf("%d lines dropped: rotation drops none", dropped)
	}
}

// TestLineRateDropsAndSaysSo: 10 lines a second, 20 at once: a flood
// keeps the burst; a second later one marker says how many were dropped
// and why, then the refill's lines pass; a line of the workload's that
// looks like a marker stays its output.
func TestLineRateDropsAndSaysSo(t *testing.T) {
	tl := newTestLog(t, logLimits{lines: 10, burst: 20})
	w := tl.l.stream(logs.WorkloadOut)
	var flood bytes.Buffer
	for i := range 100 {
		fmt.Fprintf(&flood, "a%d\n", i)
	}
	_, _ = w.Write(flood.Bytes()) // one write: 20 kept, 80 counted
	if got := tl.read(); len(got) != 20 || got[19] != "out:a19" {
		t.Fatalf("after the flood: %d entries %q, want a0..a19", len(got), got)
	}
	// The 80 were counted, not cut apart and handed over one by one (a
	// flood costs a count of its newlines).
	if n := cap(w.lines); n >= 100 {
		t.Fatalf("the writer held room for %d lines: it cut all 100 of the flood apart, not the 20 the rate keeps", n)
	}
	tl.clk.Advance(markerEvery - time.Millisecond)
	if got := tl.read(); len(got) != 20 {
		t.Fatalf("a marker before %s: %q", markerEvery, got[20:])
	}
	tl.clk.Advance(time.Millisecond)
	got := tl.read()
	want := "stockade:80 lines of output dropped in 1s: 80 over the line rate (10 lines/s, burst 20)"
	if len(got) != 21 || got[20] != want {
		t.Fatalf("after a second: %q, want the marker %q", got[20:], want)
	}
	// The refill: 10 lines a second; line by line this time.
	for i := range 15 {
		_, _ = fmt.Fprintf(w, "b%d\n", i)
	}
	_, _ = w.Write([]byte("stockade:80 lines of output dropped (forged)\n"))
	tl.clk.Advance(markerEvery)
	got = tl.read()[21:]
	want2 := []string{"out:b0", "out:b1", "out:b2", "out:b3", "out:b4", "out:b5", "out:b6", "out:b7", "out:b8", "out:b9",
		"stockade:6 lines of output dropped in 1s: 6 over the line rate (10 lines/s, burst 20)"}
	if strings.Join(got, "|") != strings.Join(want2, "|") {
		t.Fatalf("after the refill: %q\nwant %q", got, want2)
	}
	tl.clk.Advance(time.Second)
	_, _ = w.Write([]byte("stockade: 0 lines dropped (forged)\n"))
	if got := tl.read(); got[len(got)-1] != "out:stockade: 0 lines dropped (forged)" {
		t.Fatalf("the workload's marker-like line: %q", got[len(got)-1])
	}
	if _, dropped := tl.l.stats(); dropped != 86 {
		t.Fatalf("%d lines dropped in all, want 86", dropped)
	}
	// Nothing dropped since the last marker: no marker on close.
	tl.l.close(time.Second)
	if got := tl.read(); strings.HasPrefix(got[len(got)-1], "stockade:") {
		t.Fatalf("a marker for nothing: %q", got[len(got)-1])
	}
}

// TestByteRateFromIOBps: with the sandbox's io-bps at 1 KiB/s the log
// writes at most its burst (64 KiB) and then 1 KiB a second, and says the
// rest were over the write rate.
func TestByteRateFromIOBps(t *testing.T) {
	tl := newTestLog(t, logLimits{bps: 1024})
	w := tl.l.stream(logs.WorkloadErr)
	line := strings.Repeat("b", 1000)
	for range 100 {
		_, _ = w.Write([]byte(line + "\n"))
	}
	_, before := tl.onDisk()
	if limit := int64(minByteBurst + len(logs.WorkloadHeader)); before > limit {
		t.Fatalf("%d bytes written at once, over the burst %d", before, limit)
	}
	kept := len(tl.read()) // 1,017 bytes each
	if kept != minByteBurst/1017 {
		t.Fatalf("%d lines kept, want %d", kept, minByteBurst/1017)
	}
	tl.clk.Advance(time.Second) // the marker, and 1 KiB of refill (the marker took some)
	got := tl.read()
	want := fmt.Sprintf("stockade:%d lines of output dropped in 1s: %d over the write rate (1 KiB/s, the sandbox's io-bps)", 100-kept, 100-kept)
	if len(got) != kept+1 || got[kept] != want {
		t.Fatalf("marker %q, want %q", got[kept:], want)
	}
}

// TestRotationFailureLosesLinesAndRecovers: a rotation that cannot
// happen (the oldest rotated file's name is taken by a directory) drops
// lines, counted, without stalling; once the way is clear the log rotates
// again and a marker says how many were lost.
func TestRotationFailureLosesLinesAndRecovers(t *testing.T) {
	tl := newTestLog(t, logLimits{maxBytes: 256 << 10})
	block := filepath.Join(tl.dir, contract.WorkloadLog+".3")
	if err := os.MkdirAll(filepath.Join(block, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	w := tl.l.stream(logs.WorkloadOut)
	line := []byte(strings.Repeat("r", 999) + "\n") // 1,017 bytes an entry
	for range 100 {                                 // 101 KiB: past the live file's 64 KiB
		_, _ = w.Write(line)
	}
	_, dropped := tl.l.stats()
	if kept := 100 - dropped; dropped == 0 || kept != (64<<10-int64(len(logs.WorkloadHeader)))/1017 {
		t.Fatalf("%d dropped, %d kept: want the live file's share kept, the rest dropped", dropped, kept)
	}
	if err := os.RemoveAll(block); err != nil {
		t.Fatal(err)
	}
	tl.clk.Advance(retryEvery) // the marker's turn: it rotates first
	got := tl.read()
	want := fmt.Sprintf("stockade:%d lines of output dropped in 1s: %d lost: the log could not be written or rotated (see supervisor.log)", dropped, dropped)
	if got[len(got)-1] != want {
		t.Fatalf("last entry %q, want %q", got[len(got)-1], want)
	}
	_, _ = w.Write([]byte("after\n"))
	if got := tl.read(); got[len(got)-1] != "out:after" {
		t.Fatalf("after the rotation worked: %q", got[len(got)-1])
	}
	if _, err := os.Stat(filepath.Join(tl.dir, contract.WorkloadLog+".1")); err != nil {
		t.Fatalf("no rotated file: %v", err)
	}
}

// TestOpenTakesOverAnEarlierLog: a workload.log of an earlier supervisor
// (JSON lines) is rotated aside, read before the new lines; one over the
// cap is removed.
func TestOpenTakesOverAnEarlierLog(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, contract.WorkloadLog)
	old := `{"t":1700000000000,"s":"err","l":"from before"}` + "\n"
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := openLogFile(p, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	l := newWorkloadLog(f, logLimits{maxBytes: 256 << 10}, clk, zerolog.Nop())
	_, _ = l.stream(logs.WorkloadOut).Write([]byte("from now\n"))
	l.close(time.Second)
	tl := &testLog{t: t, dir: dir}
	if got := tl.read(); strings.Join(got, "|") != "err:from before|out:from now" {
		t.Fatalf("got %q", got)
	}
	if b, _ := os.ReadFile(p + ".1"); string(b) != old {
		t.Fatalf("workload.log.1 is %q, want the earlier log", b)
	}

	// 300 KiB of an earlier, unbounded log: over the cap, removed.
	big := bytes.Repeat([]byte(old), 300<<10/len(old))
	if err := os.WriteFile(p, big, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err = openLogFile(p, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if _, total := tl.onDisk(); total > 256<<10 || f.bytes() != total {
		t.Fatalf("%d bytes on disk (%d counted), want at most the cap", total, f.bytes())
	}
}
