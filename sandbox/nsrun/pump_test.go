package nsrun

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/internal/linelimit"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// recordSink records what init passes on (an OutputSink).
type recordSink struct {
	mu      sync.Mutex
	lines   map[Stream][]string
	counts  linelimit.Counts
	reports int
	// block, when set, holds every Lines call until it is closed: a
	// parent that does not keep up.
	block chan struct{}
	// done is set once the sandbox is closed: any call after is late.
	done, late bool
}

func newRecordSink() *recordSink { return &recordSink{lines: map[Stream][]string{}} }

func (r *recordSink) Lines(s Stream, lines [][]byte) {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late = r.late || r.done
	for _, l := range lines {
		r.lines[s] = append(r.lines[s], string(l))
	}
}

func (r *recordSink) Dropped(c linelimit.Counts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late = r.late || r.done
	r.counts.Add(c)
	r.reports++
}

// got is a copy of the lines of s and the counts so far.
func (r *recordSink) got(s Stream) ([]string, linelimit.Counts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines[s]...), r.counts
}

func (r *recordSink) has(s Stream, line string) bool {
	lines, _ := r.got(s)
	for _, l := range lines {
		if l == line {
			return true
		}
	}
	return false
}

// closeSandbox closes sb and marks the sink done: nothing may come after.
func closeSandbox(t *testing.T, sb *Sandbox, r *recordSink) time.Duration {
	t.Helper()
	start := time.Now()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	return took
}

// testPump is a pump in this process (no sandbox): the workload's ends,
// and the parent's end of its output read by readFrames into a sink.
type testPump struct {
	p        *pump
	out, err *os.File // the workload's ends
	parent   *os.File
	sink     *recordSink
	read     chan error // readFrames' result, once the parent reads
}

func newTestPump(t *testing.T, lim linelimit.Limits, clk clock.Clock) *testPump {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(pw.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p, ends, err := startPump(lim, fd, clk)
	if err != nil {
		t.Fatal(err)
	}
	tp := &testPump{p: p, out: ends[0], err: ends[1], parent: pr, sink: newRecordSink(), read: make(chan error, 1)}
	t.Cleanup(func() {
		tp.out.Close()
		tp.err.Close()
		pr.Close()
	})
	return tp
}

// startReading has the parent read its end.
func (tp *testPump) startReading() {
	go func() { tp.read <- readFrames(tp.parent, tp.sink) }()
}

// end closes the workload's ends and ends the pump; the parent reads to
// the end.
func (tp *testPump) end(t *testing.T) {
	t.Helper()
	tp.out.Close()
	tp.err.Close()
	tp.p.end(pumpGrace)
	select {
	case err := <-tp.read:
		if err != nil {
			t.Fatalf("readFrames: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parent's end did not end with the pump")
	}
}

// batch writes lines PREFIX0..PREFIXn-1 in one write (under PIPE_BUF
// bytes: one read, one count report).
func (tp *testPump) batch(t *testing.T, prefix string, n int) {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	if b.Len() > 4096 {
		t.Fatalf("a batch of %d bytes: over PIPE_BUF", b.Len())
	}
	if _, err := tp.out.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// waitCounts waits until the parent has counts of n lines in all.
func (tp *testPump) waitCounts(t *testing.T, n int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, c := tp.sink.got(Stdout)
		return c.Total() == n
	}, "counts of %d lines", n)
}

// TestPumpRateBurstAndCounts: 10 lines a second, 20 at once, for both
// streams together: a flood of 300 lines keeps the burst, the counts say
// the rest were over the line rate; a second later 10 more pass; the two
// streams stay apart; an unfinished line passes at the end.
func TestPumpRateBurstAndCounts(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	tp := newTestPump(t, linelimit.Limits{LinesPerSec: 10, Burst: 20}, clk)
	tp.startReading()
	fmt.Fprintln(tp.err, "to stderr")
	testenv.Eventually(t, 5*time.Second, func() bool { return tp.sink.has(Stderr, "to stderr") }, "stderr's line")
	tp.batch(t, "a", 300)
	tp.waitCounts(t, 281)
	out, c := tp.sink.got(Stdout)
	if len(out) != 19 || out[0] != "a0" || out[18] != "a18" || c[linelimit.OverLines] != 281 {
		t.Fatalf("kept %q, counts %v; want a0..a18 (the burst, after stderr's line) and 281 over the line rate", out, c)
	}
	clk.Advance(time.Second)
	tp.batch(t, "b", 15)
	tp.waitCounts(t, 286)
	out, _ = tp.sink.got(Stdout)
	if len(out) != 29 || out[19] != "b0" || out[28] != "b9" {
		t.Fatalf("after the refill: %q, want b0..b9", out[19:])
	}
	clk.Advance(time.Second)
	fmt.Fprint(tp.out, "unfinished")
	tp.end(t)
	out, c = tp.sink.got(Stdout)
	if out[len(out)-1] != "unfinished" || c.Total() != 286 {
		t.Fatalf("at the end: last line %q, counts %v", out[len(out)-1], c)
	}
}

// TestPumpNeverStalls: the parent does not read; the workload writes 64
// MiB of lines and is never held up; init's buffer stays within
// maxBacklog and the lines past it are counted as Behind; once the parent
// reads, every line is accounted for (kept or counted). The same with a
// parent that is gone: every line counted lost, none waited for.
func TestPumpNeverStalls(t *testing.T) {
	const lines = 64 << 10
	chunk := []byte(strings.Repeat("x", 1023) + "\n")
	flood := func(t *testing.T, w *os.File) {
		done := make(chan error, 1)
		go func() {
			for range lines {
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
			t.Fatal("the workload's writes were held up")
		}
	}
	t.Run("slow parent", func(t *testing.T) {
		tp := newTestPump(t, linelimit.Limits{}, clock.System{})
		flood(t, tp.out)
		tp.p.mu.Lock()
		waiting := len(tp.p.pending)
		tp.p.mu.Unlock()
		if waiting > maxBacklog {
			t.Fatalf("%d bytes waiting for the parent, over %d", waiting, maxBacklog)
		}
		tp.startReading()
		tp.end(t)
		out, c := tp.sink.got(Stdout)
		if int64(len(out))+c.Total() != lines || c[linelimit.Behind] == 0 || c.Total() != c[linelimit.Behind] {
			t.Fatalf("%d kept, counts %v: want all %d accounted for, the dropped ones as behind", len(out), c, lines)
		}
		t.Logf("%d kept, %d behind", len(out), c[linelimit.Behind])
	})
	// Nobody to tell, but the counts are kept all the same.
	t.Run("parent gone", func(t *testing.T) {
		tp := newTestPump(t, linelimit.Limits{}, clock.System{})
		tp.parent.Close()
		flood(t, tp.out)
		tp.out.Close()
		tp.err.Close()
		tp.p.end(pumpGrace)
		tp.p.mu.Lock()
		defer tp.p.mu.Unlock()
		if !tp.p.broken || tp.p.counts.Total() != lines || tp.p.counts[linelimit.Lost] == 0 || len(tp.p.pending) > maxBacklog {
			t.Fatalf("broken %v, counts %v, %d waiting: want every line counted", tp.p.broken, tp.p.counts, len(tp.p.pending))
		}
	})
}

// frame builds one frame as init writes them.
func frame(kind byte, payload []byte) []byte {
	b := appendHeader(nil, kind)
	b = append(b, payload...)
	putLength(b, 0)
	return b
}

// TestReadFramesRefusesMalformed: what the parent reads from init's pipe
// is checked: frames of the wrong size, kind or form are refused, and
// nothing after them is taken; what came before is delivered.
func TestReadFramesRefusesMalformed(t *testing.T) {
	good := append(frame('o', []byte("a\nb\n")), appendCounts(nil, linelimit.Counts{linelimit.OverLines: 3})...)
	huge := frame('o', []byte("x\n"))
	binary.BigEndian.PutUint32(huge[1:], maxFrame+1)
	negative := appendCounts(nil, linelimit.Counts{})
	binary.BigEndian.PutUint64(negative[frameHeader:], 1<<63)
	for name, bad := range map[string][]byte{
		"oversized":       huge,
		"unknown kind":    frame('x', []byte("a\n")),
		"no newline":      frame('e', []byte("a\nb")),
		"empty lines":     frame('o', nil),
		"short counts":    frame(frameDropped, make([]byte, countsSize-1)),
		"negative count":  negative,
		"cut short":       frame('o', []byte("abc\n"))[:7],
		"header cut":      {'o', 0, 0},
		"counts too long": frame(frameDropped, make([]byte, countsSize+8)),
	} {
		t.Run(name, func(t *testing.T) {
			sink := newRecordSink()
			after := frame('o', []byte("after\n"))
			err := readFrames(bytes.NewReader(append(append(append([]byte(nil), good...), bad...), after...)), sink)
			if cut := strings.HasSuffix(name, " cut") || name == "cut short"; !errors.Is(err, errFrame) && !(cut && errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("err %v, want a malformed frame", err)
			}
			out, c := sink.got(Stdout)
			if strings.Join(out, "|") != "a|b" || c.Total() != 3 || sink.reports != 1 {
				t.Fatalf("delivered %q, counts %v: want only what came before", out, c)
			}
		})
	}
	sink := newRecordSink()
	if err := readFrames(bytes.NewReader(good), sink); err != nil {
		t.Fatal(err)
	}
}

// outputSpec is bashSpec with init pumping the output within lim.
func outputSpec(t *testing.T, script string, lim linelimit.Limits, sink *recordSink) Spec {
	spec := bashSpec(t, script)
	spec.Output = &Output{Limits: lim, Sink: sink}
	return spec
}

// TestOutputThroughInit: a sandbox's init takes the workload's output:
// the streams stay apart, a long line is cut into pieces of 16 KiB, an
// unfinished line passes after 200 ms; a flood of 100,000 lines keeps the
// burst, the rest are counted exactly (the workload's bytes that look
// like init's count frames stay its output and count nothing), and the
// lines after the flood pass once the rate refills. Exec'd processes keep
// their own descriptors.
func TestOutputThroughInit(t *testing.T) {
	needSandbox(t)
	sink := newRecordSink()
	forged := string(appendCounts(nil, linelimit.Counts{linelimit.OverLines: 1 << 40}))
	script := `echo first; echo to-stderr >&2; printf 'Password: '; sleep 0.5; echo
printf "$FORGED\n"
seq 1 100000
sleep 1.5
head -c 40000 /dev/zero | tr '\0' a; echo
echo after; exec sleep 1000`
	spec := outputSpec(t, script, linelimit.Limits{LinesPerSec: 100, Burst: 50}, sink)
	spec.Env = []string{"FORGED=" + printfEscaped(forged)}
	sb := start(t, spec)
	testenv.Eventually(t, 20*time.Second, func() bool { return sink.has(Stdout, "after") }, "the line after the flood")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Exec(t.Context(), ExecSpec{Argv: []string{"echo", "from exec"}, Stdout: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitProc(t, p)
	got, _ := io_ReadAll(r)
	closeSandbox(t, sb, sink)
	if got != "from exec\n" || sink.has(Stdout, "from exec") {
		t.Fatalf("the exec'd process's output %q went elsewhere than its descriptor", got)
	}
	out, c := sink.got(Stdout)
	errs, _ := sink.got(Stderr)
	if len(out) < 4 || out[0] != "first" || out[1] != "Password: " || out[2] != "" || out[3] != forged || strings.Join(errs, "|") != "to-stderr" {
		t.Fatalf("stdout starts %q, stderr %q", out[:min(len(out), 4)], errs)
	}
	// The flood: the burst's room after the first lines, and what the
	// rate refilled while it ran; every other line counted.
	var seq int
	for _, l := range out {
		if _, err := strconv.Atoi(l); err == nil {
			seq++
		}
	}
	if int64(seq)+c[linelimit.OverLines] != 100000 || seq < 40 || seq > 200 || c.Total() != c[linelimit.OverLines] {
		t.Fatalf("%d lines of the flood kept, counts %v: want the burst's and all 100000 accounted for", seq, c)
	}
	tail := out[len(out)-4:]
	if len(tail[0]) != maxLine || len(tail[1]) != maxLine || tail[2] != strings.Repeat("a", 40000-2*maxLine) || tail[3] != "after" {
		t.Fatalf("the long line and after: %d, %d, %d bytes, then %q", len(tail[0]), len(tail[1]), len(tail[2]), tail[3])
	}
	if sink.late {
		t.Fatal("the sink was called after Close returned")
	}
	t.Logf("flood: %d kept, %d counted in %d reports", seq, c.Total(), sink.reports)
}

// printfEscaped is s as a printf format of octal escapes (an environment
// variable holds no NUL).
func printfEscaped(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\%03o", s[i])
	}
	return b.String()
}

// io_ReadAll reads r to its end as a string.
func io_ReadAll(r *os.File) (string, error) {
	defer r.Close()
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.String(), err
}

// TestOutputNeverStallsTheWorkload: a parent that does not take the
// output (its sink blocked): the workload still writes 200 MB and goes
// on; init's memory stays small; once the parent reads, every line is
// accounted for.
func TestOutputNeverStallsTheWorkload(t *testing.T) {
	needSandbox(t)
	sink := newRecordSink()
	sink.block = make(chan struct{})
	const lines = 200000
	spec := outputSpec(t, fmt.Sprintf(`yes "$(head -c 1000 /dev/zero | tr '\0' x)" | head -n %d; echo done > /sandbox/done; exec sleep 1000`, lines), linelimit.Limits{}, sink)
	sb := start(t, spec)
	released := false
	defer func() {
		if !released {
			close(sink.block)
		}
	}()
	var hwm string
	testenv.Eventually(t, 60*time.Second, func() bool {
		hwm = procStatus(t, sb.InitPid(), "VmHWM")
		_, err := os.Stat(filepath.Join(spec.Workspace, "done"))
		return err == nil
	}, "the workload to write %d lines with nobody reading", lines)
	kb, err := strconv.ParseInt(strings.TrimSuffix(hwm, " kB"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if kb > 64<<10 {
		t.Fatalf("init's memory peaked at %d kB writing %d MB nobody read: not bounded", kb, lines/1000)
	}
	close(sink.block)
	released = true
	// "done" is the workload's own echo... to its workspace; the last
	// of its output follows.
	closeSandbox(t, sb, sink)
	out, c := sink.got(Stdout)
	if int64(len(out))+c.Total() != lines || c[linelimit.Behind] == 0 {
		t.Fatalf("%d kept, counts %v: want all %d accounted for, some as behind", len(out), c, lines)
	}
	t.Logf("init's peak memory %d kB; %d lines kept, %d counted behind", kb, len(out), c[linelimit.Behind])
}

// TestOutputPassedOnAsTheSandboxCloses: what the workload wrote before
// Close is with the sink when Close returns (init kills the sandbox's
// processes and passes on what their pipes held, and the counts), even
// during a flood; nothing comes after.
func TestOutputPassedOnAsTheSandboxCloses(t *testing.T) {
	needSandbox(t)
	sink := newRecordSink()
	sb := start(t, outputSpec(t, `echo first; printf 'last words'; exec sleep 1000`, linelimit.Limits{LinesPerSec: 1000, Burst: 10000}, sink))
	testenv.Eventually(t, 10*time.Second, func() bool { return sink.has(Stdout, "first") }, "the first line")
	closeSandbox(t, sb, sink)
	if out, _ := sink.got(Stdout); strings.Join(out, "|") != "first|last words" {
		t.Fatalf("after Close: %q", out)
	}

	flood := newRecordSink()
	sb = start(t, outputSpec(t, `(sleep 1000 &); exec yes`, linelimit.Limits{LinesPerSec: 1000, Burst: 10000}, flood))
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, c := flood.got(Stdout)
		return c.Total() > 0
	}, "a count of the flood")
	took := closeSandbox(t, sb, flood)
	out, c := flood.got(Stdout)
	if took > 2*pumpGrace || flood.late || len(out) < 10000 {
		t.Fatalf("Close took %s (late calls %v), %d lines kept", took, flood.late, len(out))
	}
	t.Logf("Close during a flood took %s; %d lines kept, %d counted", took, len(out), c.Total())
}

// TestOutputPipeOutOfReach: the workload (as the sandbox's root, /proc
// allowed read-write by its policy) cannot reach init's descriptors
// (opening /proc/1/fd/N takes ptrace access to init, which the kernel
// refuses: init holds capabilities the workload lacks, and Landlock
// scopes ptrace to the workload's domain): neither the pipe to the parent
// nor init's own stdout and stderr; a count frame written anywhere it can
// reach is its output.
func TestOutputPipeOutOfReach(t *testing.T) {
	needSandbox(t)
	sink := newRecordSink()
	spec := outputSpec(t, `for fd in 1 2 5; do
  if printf "$FORGED" 2>/dev/null > /proc/1/fd/$fd; then echo "wrote fd $fd"; else echo "refused fd $fd"; fi
done
readlink /proc/1/fd/5 >/dev/null 2>&1 && echo "followed fd 5" || echo "refused link"
echo done`, linelimit.Limits{}, sink)
	spec.Env = []string{"FORGED=" + printfEscaped(string(appendCounts(nil, linelimit.Counts{linelimit.OverLines: 42})))}
	spec.Filesystem.ReadWrite = append(spec.Filesystem.ReadWrite, "/proc")
	sb := start(t, spec)
	wait(t, sb)
	closeSandbox(t, sb, sink)
	out, c := sink.got(Stdout)
	if strings.Join(out, "|") != "refused fd 1|refused fd 2|refused fd 5|refused link|done" || c.Total() != 0 {
		t.Fatalf("the workload's view of init's descriptors: %q, counts %v", out, c)
	}
}

// FuzzReadFrames: whatever the pipe holds, the parent never panics and
// hands on only well-formed lines and counts.
func FuzzReadFrames(f *testing.F) {
	f.Add(append(frame('o', []byte("a\nb\n")), appendCounts(nil, linelimit.Counts{1, 2, 3, 4})...))
	f.Add(frame('e', []byte("x")))
	f.Add([]byte{frameDropped, 0, 0, 0, byte(countsSize)})
	f.Fuzz(func(t *testing.T, in []byte) {
		sink := newRecordSink()
		_ = readFrames(bytes.NewReader(in), sink)
		for s, lines := range sink.lines {
			if s != Stdout && s != Stderr {
				t.Fatalf("lines of stream %v", s)
			}
			for _, l := range lines {
				if strings.Contains(l, "\n") {
					t.Fatalf("a line with a newline: %q", l)
				}
			}
		}
		for _, c := range sink.counts {
			if c < 0 {
				t.Fatalf("negative count %v", sink.counts)
			}
		}
	})
}
