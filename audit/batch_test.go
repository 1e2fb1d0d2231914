package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// threadWrites returns the number of write(2)-family system calls the
// calling thread has made (syscw of /proc/thread-self/io), or false when the
// kernel does not account them. Reading the file makes no write. The caller
// locks its goroutine to the thread: a regular file's Write is a blocking
// system call made on the calling goroutine's thread, so the difference
// around a call counts the writes that call made.
func threadWrites(t *testing.T) (int64, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("/proc/thread-self/io: %q: %v", l, err)
			}
			return n, true
		}
	}
	return 0, false
}

// expectedLine is the line File writes for e: json.Marshal with TimeMs
// from Time.
func expectedLine(t *testing.T, e Event) string {
	t.Helper()
	e.TimeMs = e.Time.UnixMilli()
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readRaw splits a file into its lines, failing on a last line without a
// newline (bufio.Scanner would hide it, and its token limit would truncate
// the long random events).
func readRaw(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	return strings.Split(string(b[:len(b)-1]), "\n")
}

func compareLines(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d differs from json.Marshal %s", i, firstDiff([]byte(got[i]), []byte(want[i])))
		}
	}
}

// TestFileLinesAreJSONMarshal: File.Record and File.RecordBatch write, for
// random events, exactly the lines json.Marshal writes (TimeMs taken from
// Time), in order, and leave the caller's events unchanged.
func TestFileLinesAreJSONMarshal(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 300; i++ {
		if r.IntN(2) == 0 {
			e := randEvent(r)
			want = append(want, expectedLine(t, e))
			af.Record(e)
			continue
		}
		batch := make([]Event, r.IntN(20))
		for j := range batch {
			batch[j] = randEvent(r)
			want = append(want, expectedLine(t, batch[j]))
		}
		before := fmt.Sprintf("%#v", batch)
		af.RecordBatch(batch)
		if after := fmt.Sprintf("%#v", batch); after != before {
			t.Fatal("RecordBatch changed the caller's events")
		}
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	compareLines(t, readRaw(t, path), want)
}

// TestRecordBatchDenialOnDiskInOneWrite: a batch holding a denial is in the
// file when RecordBatch returns, with what was buffered before it and the
// allowed events after it in the batch, written by one write(2) (counted
// by the kernel for the calling thread) although the flush interval is an
// hour. A batch of allowed events only is not written at once.
func TestRecordBatchDenialOnDiskInOneWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer af.Close()
	first := NewDecision(ClassDNS, true, reason.None)
	af.Record(first)
	allowed := []Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassNetwork, true, reason.None)}
	af.RecordBatch(allowed)
	if b, _ := os.ReadFile(path); len(b) != 0 {
		t.Fatalf("allowed events were written at once (group commit off?): %q", b)
	}
	batch := []Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, false, reason.PolicyDNSIneligible),
		NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, false, reason.ConnectionLimit), NewDecision(ClassDNS, true, reason.None)}
	batch[1].Query = &Query{Hostname: "exfil.example", Type: "TXT", Rcode: "REFUSED"}

	runtime.LockOSThread()
	w0, counted := threadWrites(t)
	af.RecordBatch(batch)
	w1, _ := threadWrites(t)
	runtime.UnlockOSThread()

	want := []string{expectedLine(t, first)}
	for _, e := range append(allowed, batch...) {
		want = append(want, expectedLine(t, e))
	}
	compareLines(t, readRaw(t, path), want)
	if !counted {
		testenv.Unavailable(t, "/proc/thread-self/io has no syscw here: write(2) count not checked (the lines were)")
	} else if w1-w0 != 1 {
		t.Fatalf("RecordBatch made %d write system calls, want 1", w1-w0)
	}
}

// TestWritesPerDenialBurst: ten bursts of 16 events with 4 denials each
// cost ten write(2) calls as batches, and forty as single Records (each
// denial is written before Record returns).
func TestWritesPerDenialBurst(t *testing.T) {
	if _, ok := threadWrites(t); !ok {
		testenv.Unavailable(t, "/proc/thread-self/io has no syscw here")
	}
	burst := make([]Event, 16)
	for i := range burst {
		burst[i] = NewDecision(ClassDNS, i%4 != 3, reason.None)
	}
	for _, tc := range []struct {
		name   string
		record func(af *File)
		want   int64
	}{
		{"batch", func(af *File) { af.RecordBatch(burst) }, 10},
		{"records", func(af *File) {
			for _, e := range burst {
				af.Record(e)
			}
		}, 40},
	} {
		af, err := OpenFile(filepath.Join(t.TempDir(), tc.name+".jsonl"), WithFlushInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		runtime.LockOSThread()
		w0, _ := threadWrites(t)
		for i := 0; i < 10; i++ {
			tc.record(af)
		}
		w1, _ := threadWrites(t)
		runtime.UnlockOSThread()
		if err := af.Close(); err != nil {
			t.Fatal(err)
		}
		if w1-w0 != tc.want {
			t.Errorf("%s: %d write system calls for 10 bursts, want %d", tc.name, w1-w0, tc.want)
		}
	}
}

// TestRecordBatchAllowedFlushedWithinInterval: a batch of allowed events
// only reaches the file by the flush timer.
func TestRecordBatchAllowedFlushedWithinInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer af.Close()
	batch := make([]Event, 20)
	for i := range batch {
		batch[i] = NewDecision(ClassNetwork, true, reason.None)
	}
	af.RecordBatch(batch)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if n := bytes.Count(b, []byte("\n")); n == len(batch) {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%d of %d events written within 5 s of a 5 ms flush interval", n, len(batch))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRecordBatchRotates: a batch larger than the rotation size is split
// across files, none over the limit, no line lost or reordered.
func TestRecordBatchRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithMaxBytes(2000), WithKeep(20), WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for round := 0; round < 3; round++ {
		batch := make([]Event, 25)
		for i := range batch {
			batch[i] = NewDecision(ClassNetwork, i != 12, reason.None)
			batch[i].Message = fmt.Sprintf("round %d event %d", round, i)
			want = append(want, expectedLine(t, batch[i]))
		}
		af.RecordBatch(batch)
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 20; i >= 0; i-- {
		p := path
		if i > 0 {
			p = fmt.Sprintf("%s.%d", path, i)
		}
		st, err := os.Stat(p)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 2000 {
			t.Fatalf("%s is %d bytes, over the 2000-byte limit", p, st.Size())
		}
		got = append(got, readRaw(t, p)...)
	}
	compareLines(t, got, want)
}

// TestRecordBatchAfterClose counts every event of a batch as lost.
func TestRecordBatchAfterClose(t *testing.T) {
	af, err := OpenFile(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	af.RecordBatch(nil)
	af.RecordBatch([]Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, false, reason.None)})
	if af.Failed() != 2 {
		t.Fatalf("failed=%d after a batch of 2 into a closed file, want 2", af.Failed())
	}
}

// TestFileConcurrentRecordAndBatch: Record and RecordBatch from many
// goroutines interleave whole lines.
func TestFileConcurrentRecordAndBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Millisecond), WithMaxBytes(256<<10))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := []Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, g%2 == 0, reason.None)}
			for i := 0; i < 200; i++ {
				if g < 3 {
					af.Record(batch[i%2])
				} else {
					af.RecordBatch(batch)
				}
			}
		}()
	}
	wg.Wait()
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range []string{path + ".3", path + ".2", path + ".1", path} {
		if _, err := os.Stat(p); err == nil {
			lines = append(lines, readLines(t, p)...)
		}
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("invalid JSON line %q", l)
		}
	}
	if len(lines) != 3*200+3*400 {
		t.Fatalf("got %d lines, want %d", len(lines), 3*200+3*400)
	}
}

type recorder struct {
	mu      sync.Mutex
	events  []Event
	batches int
}

func (r *recorder) Record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

type batchRecorder struct{ recorder }

func (r *batchRecorder) RecordBatch(events []Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches++
	r.events = append(r.events, events...)
}

// TestMultiRecordBatch: Multi hands the batch to members that take
// batches and records it event by event into the others; LogSink logs one
// line per event.
func TestMultiRecordBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	af, err := OpenFile(path, WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	plain, batched := &recorder{}, &batchRecorder{}
	m := Multi{af, plain, batched, LogSink{Log: zerolog.New(&logBuf)}, Discard{}}
	batch := []Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, false, reason.PolicyDNSIneligible), NewDecision(ClassNetwork, true, reason.None)}
	RecordAll(m, batch)
	if got := readRaw(t, path); len(got) != 3 {
		t.Fatalf("file has %d lines when RecordBatch returned, want 3", len(got))
	}
	if len(plain.events) != 3 || plain.events[1].ActionID != ActionDenied {
		t.Fatalf("plain sink got %d events, want the 3 in order", len(plain.events))
	}
	if batched.batches != 1 || len(batched.events) != 3 || batched.events[1].ActionID != ActionDenied {
		t.Fatalf("batch sink got %d batches of %d events, want 1 of 3", batched.batches, len(batched.events))
	}
	sc := bufio.NewScanner(&logBuf)
	n := 0
	for sc.Scan() {
		n++
	}
	if n != 3 {
		t.Fatalf("LogSink logged %d lines, want 3:\n%s", n, logBuf.String())
	}
	RecordAll(plain, batch)
	if len(plain.events) != 6 {
		t.Fatalf("RecordAll into a plain sink: %d events, want 6", len(plain.events))
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
}
