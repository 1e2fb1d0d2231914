package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

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

func (m *memFile) entries(t *testing.T) []entry {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []entry
	for _, l := range strings.SplitAfter(m.b.String(), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasSuffix(l, "\n") {
			t.Fatalf("unterminated line %q", l)
		}
		var e entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

func lines(es []entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.S+":"+e.L)
	}
	return out
}

func TestLineWriterSplitsStreamsAndLines(t *testing.T) {
	f := &memFile{}
	l := newWorkloadLog(f, zerolog.Nop())
	now := time.UnixMilli(1_700_000_000_123)
	l.now = func() time.Time { return now }
	out, errw := l.stream("out"), l.stream("err")
	_, _ = out.Write([]byte("one\ntw"))
	_, _ = errw.Write([]byte("bad <&> \xff\n"))
	_, _ = out.Write([]byte("o\n\nthree\n"))
	got := lines(f.entries(t))
	want := []string{"out:one", "err:bad <&> \uFFFD", "out:two", "out:", "out:three"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, e := range f.entries(t) {
		if e.T != now.UnixMilli() {
			t.Fatalf("time %d, want %d", e.T, now.UnixMilli())
		}
	}
	if !strings.Contains(f.b.String(), `"l":"bad <&> `) {
		t.Fatalf("HTML-escaped: %s", f.b.String())
	}
	// Each Write's complete lines share one write(2).
	if f.writes != 3 {
		t.Fatalf("%d writes, want 3", f.writes)
	}
}

func TestLineWriterCapsLongLines(t *testing.T) {
	f := &memFile{}
	l := newWorkloadLog(f, zerolog.Nop())
	w := l.stream("out")
	w.max = 8
	// 20 bytes of ASCII, then runes of 3 bytes that must not be cut.
	_, _ = w.Write([]byte(strings.Repeat("a", 20) + "\n"))
	_, _ = w.Write([]byte("ab€€€€cd\n")) // 2 + 12 + 2 bytes
	_, _ = w.Write([]byte("1234567"))    // then 1 more byte of this line and a newline
	_, _ = w.Write([]byte("8\n"))
	got := lines(f.entries(t))
	want := []string{"out:aaaaaaaa", "out:aaaaaaaa", "out:aaaa", "out:ab€€", "out:€€cd", "out:12345678"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	for _, e := range f.entries(t) {
		if !utf8.ValidString(e.L) || len(e.L) > 8 {
			t.Fatalf("piece %q", e.L)
		}
	}
}

func TestLineWriterFlushesAPartialLineAfterAWhile(t *testing.T) {
	f := &memFile{}
	l := newWorkloadLog(f, zerolog.Nop())
	w := l.stream("out")
	w.after = 150 * time.Millisecond
	start := time.Now()
	_, _ = w.Write([]byte("Password: "))
	if n := len(f.entries(t)); n != 0 {
		t.Fatalf("a partial line was written at once")
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(f.entries(t)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	waited := time.Since(start)
	if got := lines(f.entries(t)); len(got) != 1 || got[0] != "out:Password: " || waited < w.after {
		t.Fatalf("partial line %q after %s", got, waited)
	}
	// Its end arrives later: a line of its own.
	_, _ = w.Write([]byte("hunter2\n"))
	if got := lines(f.entries(t)); len(got) != 2 || got[1] != "out:hunter2" {
		t.Fatalf("got %q", got)
	}
}

func TestPipeDrainsAndNeverBlocksTheWorkload(t *testing.T) {
	f := &memFile{}
	l := newWorkloadLog(f, zerolog.Nop())
	out, err := l.pipe("out")
	if err != nil {
		t.Fatal(err)
	}
	errw, err := l.pipe("err")
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
	got := lines(f.entries(t))
	sort.Strings(got) // the two pipes are drained side by side
	if strings.Join(got, "|") != "err:to err|out:to out|out:unfinished" {
		t.Fatalf("got %q", got)
	}

	// A file that fails every write: the workload's writes still finish
	// (64 MiB, far more than a pipe holds), the lines are counted lost.
	bad := &memFile{fail: true}
	l = newWorkloadLog(bad, zerolog.Nop())
	w, err := l.pipe("out")
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != 64<<10 {
		t.Fatalf("%d lines counted lost, want %d", l.failed, 64<<10)
	}
}
