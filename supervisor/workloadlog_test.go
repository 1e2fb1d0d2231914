package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/linelimit"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/logs"
	"github.com/stockade-dev/stockade/sandbox/nsrun"
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
	t.Cleanup(tl.l.close)
	return tl
}

// lines hands the log lines of s, as init's frames do.
func (tl *testLog) lines(s nsrun.Stream, lines ...string) {
	bs := make([][]byte, len(lines))
	for i, l := range lines {
		bs[i] = []byte(l)
	}
	tl.l.Lines(s, bs)
}

// read is what `sandbox logs` shows of the workload: "stream:text" per
// entry (package logs reads the files).
func (tl *testLog) read() []string {
	tl.t.Helper()
	var out []string
	for _, e := range readEntries(tl.t, tl.dir) {
		out = append(out, e.Stream+":"+e.Text)
	}
	return out
}

// readEntries reads the workload's entries of the log directory dir.
func readEntries(t *testing.T, dir string) []logs.Entry {
	t.Helper()
	r, err := logs.Open(dir, logs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []logs.Entry
	for {
		es, done, err := r.Next(1000, 1<<20)
		if err != nil {
			t.Fatal(err)
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

// TestLogWritesInitsLines: each call's lines are stamped with their
// stream and time and written in one write(2); an entry's bytes are what
// init's byte rate counts (linelimit.EntryOverhead and the line).
func TestLogWritesInitsLines(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	cf := &countingFile{File: tl.l.file.f.(*os.File)}
	tl.l.file.f = cf
	tl.lines(nsrun.Stdout, "one", "two")
	tl.lines(nsrun.Stderr, "bad <&> \xff")
	tl.lines(nsrun.Stdout, "", "three")
	got := tl.read()
	want := []string{"out:one", "out:two", "err:bad <&> \uFFFD", "out:", "out:three"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, e := range readEntries(t, tl.dir) {
		if !e.Time.Equal(t0.Truncate(time.Millisecond)) {
			t.Fatalf("time %s, want %s", e.Time, t0)
		}
	}
	if cf.writes != 3 {
		t.Fatalf("%d writes, want 3", cf.writes)
	}
	// A line of "y" costs its prefix: 18 bytes, what init counts it as.
	before := tl.l.file.size
	tl.lines(nsrun.Stdout, "y")
	if grew := tl.l.file.size - before; grew != 1+linelimit.EntryOverhead {
		t.Fatalf("a line of y took %d bytes on disk, want 18 (1 + linelimit.EntryOverhead)", grew)
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
	const n = 10000
	for i := range n {
		tl.lines(nsrun.Stdout, fmt.Sprintf("line %06d %s", i, strings.Repeat("z", 80)))
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

// TestMarkerFromInitsCounts: init's counts (one report, then several
// within a second) become one marker a second saying how many lines were
// dropped and why, with the limits init applied; a workload's line that
// looks like a marker stays its output; nothing dropped, no marker.
func TestMarkerFromInitsCounts(t *testing.T) {
	tl := newTestLog(t, logLimits{rates: linelimit.Limits{LinesPerSec: 10, Burst: 20, BytesPerSec: 2048}})
	tl.lines(nsrun.Stdout, "a0", "a1")
	tl.l.Dropped(linelimit.Counts{linelimit.OverLines: 80})
	tl.clk.Advance(markerEvery - time.Millisecond)
	if got := tl.read(); len(got) != 2 {
		t.Fatalf("a marker before %s: %q", markerEvery, got[2:])
	}
	tl.clk.Advance(time.Millisecond)
	got := tl.read()
	want := "stockade:80 lines of output dropped in 1s: 80 over the line rate (10 lines/s, burst 20)"
	if len(got) != 3 || got[2] != want {
		t.Fatalf("after a second: %q, want the marker %q", got[2:], want)
	}
	// Several reports within a second: one marker, every reason.
	tl.l.Dropped(linelimit.Counts{linelimit.OverLines: 5})
	tl.clk.Advance(300 * time.Millisecond)
	tl.l.Dropped(linelimit.Counts{linelimit.OverLines: 1, linelimit.OverBytes: 2, linelimit.Behind: 3})
	tl.lines(nsrun.Stdout, "stockade:80 lines of output dropped (forged)")
	tl.clk.Advance(700 * time.Millisecond)
	got = tl.read()[3:]
	want2 := []string{"out:stockade:80 lines of output dropped (forged)",
		"stockade:11 lines of output dropped in 1s: 6 over the line rate (10 lines/s, burst 20); 2 over the write rate (2 KiB/s, the sandbox's io-bps); 3 while the log's writes were behind the output"}
	if strings.Join(got, "|") != strings.Join(want2, "|") {
		t.Fatalf("after several reports: %q\nwant %q", got, want2)
	}
	if _, dropped := tl.l.stats(); dropped != 91 {
		t.Fatalf("%d lines dropped in all, want 91", dropped)
	}
	// Counts of nothing: no marker, on a timer or on close.
	tl.l.Dropped(linelimit.Counts{})
	tl.clk.Advance(2 * markerEvery)
	tl.l.close()
	if got := tl.read(); len(got) != 5 {
		t.Fatalf("a marker for nothing: %q", got[5:])
	}
}

// TestMarkerOnClose: counts that came less than a second before the log
// closes get their marker as it closes; counts after that are ignored.
func TestMarkerOnClose(t *testing.T) {
	tl := newTestLog(t, logLimits{rates: linelimit.Limits{LinesPerSec: 1000, Burst: 10000}})
	tl.l.Dropped(linelimit.Counts{linelimit.OverLines: 7})
	tl.clk.Advance(250 * time.Millisecond)
	tl.l.close()
	got := tl.read()
	if want := "stockade:7 lines of output dropped in 250ms: 7 over the line rate (1000 lines/s, burst 10000)"; len(got) != 1 || got[0] != want {
		t.Fatalf("on close: %q, want %q", got, want)
	}
	tl.l.Dropped(linelimit.Counts{linelimit.OverLines: 1})
	tl.lines(nsrun.Stdout, "late")
	if got := tl.read(); len(got) != 1 {
		t.Fatalf("written after close: %q", got)
	}
}

// TestByteRateFromIOBps: with the sandbox's io-bps at 1 KiB/s the log
// writes at most its burst (64 KiB) and then 1 KiB a second, and says the
// rest were over the write rate (init applies the same rate first; this
// is the rate of the log's own writes, markers included).
func TestByteRateFromIOBps(t *testing.T) {
	tl := newTestLog(t, logLimits{rates: linelimit.Limits{BytesPerSec: 1024}})
	line := strings.Repeat("b", 1000)
	for range 100 {
		tl.lines(nsrun.Stderr, line)
	}
	_, before := tl.onDisk()
	if limit := int64(linelimit.MinByteBurst + len(logs.WorkloadHeader)); before > limit {
		t.Fatalf("%d bytes written at once, over the burst %d", before, limit)
	}
	kept := len(tl.read()) // 1,017 bytes each
	if kept != linelimit.MinByteBurst/1017 {
		t.Fatalf("%d lines kept, want %d", kept, linelimit.MinByteBurst/1017)
	}
	tl.clk.Advance(time.Second) // the marker, and 1 KiB of refill (the marker took some)
	got := tl.read()
	want := fmt.Sprintf("stockade:%d lines of output dropped in 1s: %d over the write rate (1 KiB/s, the sandbox's io-bps)", 100-kept, 100-kept)
	if len(got) != kept+1 || got[kept] != want {
		t.Fatalf("marker %q, want %q", got[kept:], want)
	}
}

// TestFailingWritesAreCounted: a file that fails every write: nothing is
// kept, every line is counted lost, and the marker (which cannot be
// written either) keeps its counts.
func TestFailingWritesAreCounted(t *testing.T) {
	tl := newTestLog(t, logLimits{})
	mf := &memFile{fail: true}
	tl.l.file.f = mf
	for i := range 100 {
		tl.lines(nsrun.Stdout, fmt.Sprint(i), "x")
	}
	tl.clk.Advance(markerEvery)
	if _, dropped := tl.l.stats(); dropped != 200 {
		t.Fatalf("%d lines counted dropped, want 200", dropped)
	}
	if tl.l.drops[linelimit.Lost] != 200 || mf.b.Len() != 0 {
		t.Fatalf("drops %v, %d bytes kept; want 200 lost, nothing kept", tl.l.drops, mf.b.Len())
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
	for _, i := range []string{".1", ".2"} { // so that the rotation must move .2 onto .3
		if err := os.WriteFile(filepath.Join(tl.dir, contract.WorkloadLog+i), []byte(logs.WorkloadHeader), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	line := strings.Repeat("r", 999) // 1,017 bytes an entry
	for range 100 {                  // 101 KiB: past the live file's 64 KiB
		tl.lines(nsrun.Stdout, line)
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
	tl.lines(nsrun.Stdout, "after")
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
	l.Lines(nsrun.Stdout, [][]byte{[]byte("from now")})
	l.close()
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

// TestWorkloadLogFromInit: a real sandbox whose init pumps the output
// into the log at 100 lines a second, 50 at once: a flood of 100,000
// lines leaves the burst in the log and markers whose counts, with the
// lines kept, account for every line; the count reported is the markers'
// sum; the line after the flood is there.
func TestWorkloadLogFromInit(t *testing.T) {
	testenv.NeedRoot(t)
	testenv.NeedTool(t, "bash", "bash")
	dir := t.TempDir()
	f, err := openLogFile(filepath.Join(dir, contract.WorkloadLog), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	l := newWorkloadLog(f, logLimits{maxBytes: 1 << 20, rates: linelimit.Limits{LinesPerSec: 100, Burst: 50}}, clock.System{}, zerolog.Nop())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := nsrun.Start(ctx, nsrun.Spec{
		Argv:       []string{"/bin/bash", "-c", "echo first; seq 1 100000; sleep 1.5; echo after; exec sleep 1000"},
		Workspace:  t.TempDir(),
		HostIDBase: 0x7FFE0000, // below 2^31, outside the default pool (idrange) and nsrun's tests' range
		Filesystem: nsrun.Filesystem{ReadOnly: []string{"/usr", "/bin", "/lib", "/lib64"}},
		Output:     l.output(),
	})
	if err != nil {
		t.Fatal(err)
	}
	tl := &testLog{t: t, dir: dir}
	testenv.Eventually(t, 20*time.Second, func() bool {
		got := tl.read()
		return len(got) > 0 && got[len(got)-1] == "out:after"
	}, "the line after the flood")
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	l.close()
	got := tl.read()
	var kept, counted int64
	for _, g := range got[1 : len(got)-1] {
		if m := markerCount.FindStringSubmatch(g); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			counted += n
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(g, "out:")); err != nil {
			t.Fatalf("unexpected entry %q", g)
		}
		kept++
	}
	_, dropped := l.stats()
	if got[0] != "out:first" || kept+counted != 100000 || kept < 49 || kept > 200 || dropped != counted {
		t.Fatalf("first %q; %d lines of the flood kept, %d counted by markers, %d reported: want the burst kept and all accounted for", got[0], kept, counted, dropped)
	}
	t.Logf("%d lines kept, %d counted in markers", kept, counted)
}

var markerCount = regexp.MustCompile(`^stockade:(\d+) lines of output dropped in [0-9.]+m?s: \d+ over the line rate \(100 lines/s, burst 50\)$`)
