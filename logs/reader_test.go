package logs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/contract"
)

// base is the time of the test lines (ms offsets from it).
var base = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

func workloadJSON(t *testing.T, ms int, stream, line string) string {
	t.Helper()
	b, err := json.Marshal(workloadLine{T: at(ms).UnixMilli(), S: stream, L: line})
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func eventJSON(t *testing.T, ms int, class audit.Class, msg string) string {
	t.Helper()
	e := audit.NewDecision(class, false, "endpoint_not_allowed")
	if class == audit.ClassLifecycle {
		e = audit.Event{ClassUID: class, ActivityName: "Start", SeverityID: audit.SeverityInformational}
	}
	e.TimeMs, e.Message = at(ms).UnixMilli(), msg
	e.Dst = &audit.Endpoint{Hostname: msg, Port: 443}
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// key names an entry in expectations: source/stream@ms:text-ish.
func key(e Entry) string {
	ms := e.Time.Sub(base).Milliseconds()
	switch e.Source {
	case SourceWorkload:
		return fmt.Sprintf("%s@%d:%s", e.Stream, ms, e.Text)
	case SourceAudit:
		var ev audit.Event
		_ = json.Unmarshal(e.Event, &ev)
		return fmt.Sprintf("audit@%d:%s", ms, ev.Dst.Hostname)
	default:
		return fmt.Sprintf("life@%d", ms)
	}
}

// readAll reads until done (non-follow) with small batches.
func readAll(t *testing.T, dir string, o Options) []string {
	t.Helper()
	r, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for i := 0; ; i++ {
		es, done, err := r.Next(3, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got = append(got, key(e))
		}
		if done {
			return got
		}
		if len(es) == 0 || i > 100000 {
			t.Fatalf("no progress and not done after %v", got)
		}
	}
}

// sample: workload lines at 0..90 step 10 (odd tens on err), audit at
// 15, 45, 95, lifecycle at 5 and 46.
func sample(t *testing.T) string {
	dir := t.TempDir()
	var w strings.Builder
	for i := 0; i < 10; i++ {
		st := StreamOut
		if i%2 == 1 {
			st = StreamErr
		}
		w.WriteString(workloadJSON(t, i*10, st, fmt.Sprintf("line %d", i)))
	}
	appendFile(t, filepath.Join(dir, contract.WorkloadLog), w.String())
	appendFile(t, filepath.Join(dir, contract.AuditLog), eventJSON(t, 15, audit.ClassNetwork, "a.test")+eventJSON(t, 45, audit.ClassDNS, "b.test")+eventJSON(t, 95, audit.ClassNetwork, "c.test"))
	appendFile(t, filepath.Join(dir, contract.LifecycleLog), eventJSON(t, 5, audit.ClassLifecycle, "created")+eventJSON(t, 46, audit.ClassLifecycle, "ready"))
	return dir
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
	}
}

func TestMergeInTimeOrder(t *testing.T) {
	dir := sample(t)
	all := []string{"out@0:line 0", "life@5", "err@10:line 1", "audit@15:a.test", "out@20:line 2", "err@30:line 3", "out@40:line 4",
		"audit@45:b.test", "life@46", "err@50:line 5", "out@60:line 6", "err@70:line 7", "out@80:line 8", "err@90:line 9", "audit@95:c.test"}
	eq(t, "all", readAll(t, dir, Options{}), all)
	eq(t, "audit only", readAll(t, dir, Options{AuditOnly: true}), []string{"life@5", "audit@15:a.test", "audit@45:b.test", "life@46", "audit@95:c.test"})
	// Tail counts across the sources: the last N of the merged result.
	eq(t, "tail 3", readAll(t, dir, Options{Tail: 3}), all[len(all)-3:])
	eq(t, "tail 7", readAll(t, dir, Options{Tail: 7}), all[len(all)-7:])
	eq(t, "tail 100", readAll(t, dir, Options{Tail: 100}), all)
	eq(t, "tail 2 audit", readAll(t, dir, Options{Tail: 2, AuditOnly: true}), []string{"life@46", "audit@95:c.test"})
	// Since applies to every source.
	eq(t, "since 45", readAll(t, dir, Options{Since: at(45)}), all[7:])
	eq(t, "since 45 tail 2", readAll(t, dir, Options{Since: at(45), Tail: 2}), all[len(all)-2:])
	eq(t, "since 89 tail 5", readAll(t, dir, Options{Since: at(89), Tail: 5}), all[len(all)-2:])
	eq(t, "since after all", readAll(t, dir, Options{Since: at(1000)}), nil)
	// Next's limits: a batch of at most maxEntries, and at least one entry
	// whatever maxBytes.
	r, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if es, _, _ := r.Next(100, 1); len(es) != 1 {
		t.Fatalf("maxBytes 1: %d entries, want 1", len(es))
	}
	if es, _, _ := r.Next(4, 1<<20); len(es) != 4 {
		t.Fatalf("maxEntries 4: %d entries", len(es))
	}
}

func TestTailMatchesMergeOnLargeFiles(t *testing.T) {
	// Lines longer than a read chunk boundary and many chunks: the tail
	// found backwards is the suffix of the full merge.
	dir := t.TempDir()
	var w, a strings.Builder
	for i := 0; i < 3000; i++ {
		w.WriteString(workloadJSON(t, i*3, StreamOut, strings.Repeat("x", i%200)+fmt.Sprint(i)))
		if i%7 == 0 {
			a.WriteString(eventJSON(t, i*3+1, audit.ClassNetwork, fmt.Sprintf("h%d.test", i)))
		}
	}
	appendFile(t, filepath.Join(dir, contract.WorkloadLog), w.String())
	appendFile(t, filepath.Join(dir, contract.AuditLog), a.String())
	all := readAll(t, dir, Options{})
	if len(all) != 3000+429 {
		t.Fatalf("%d entries", len(all))
	}
	for _, n := range []int{1, 2, 999, 1234, 3428, 3429, 5000} {
		want := all
		if n < len(all) {
			want = all[len(all)-n:]
		}
		eq(t, fmt.Sprintf("tail %d", n), readAll(t, dir, Options{Tail: n}), want)
	}
	since := readAll(t, dir, Options{Since: at(1500 * 3)})
	eq(t, "since", since, all[len(all)-len(since):])
	if !strings.HasPrefix(since[0], "out@4500:") {
		t.Fatalf("since starts at %s", since[0])
	}
}

func TestBadLinesAreSkipped(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("y", maxLine+10)
	appendFile(t, filepath.Join(dir, contract.AuditLog), "not json\n\n"+eventJSON(t, 1, audit.ClassNetwork, "ok.test")+
		`{"time":0}`+"\n"+long+"\n"+eventJSON(t, 2, audit.ClassNetwork, "ok2.test")+`{"time":3,"partial`)
	want := []string{"audit@1:ok.test", "audit@2:ok2.test"}
	eq(t, "forward", readAll(t, dir, Options{}), want)
	eq(t, "tail", readAll(t, dir, Options{Tail: 5}), want)
	eq(t, "tail 1", readAll(t, dir, Options{Tail: 1}), want[1:])
}

func TestPlainWorkloadLinesOfEarlierSupervisors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, contract.WorkloadLog)
	appendFile(t, p, "hello\nworld\n")
	mt := base.Add(time.Hour)
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	es, done, err := r.Next(10, 1<<20)
	if err != nil || !done || len(es) != 2 || es[0].Text != "hello" || es[1].Stream != StreamOut || !es[1].Time.Equal(mt) {
		t.Fatalf("%+v done=%v err=%v", es, done, err)
	}
}

func TestMissingDirectoryIsEmpty(t *testing.T) {
	eq(t, "missing", readAll(t, filepath.Join(t.TempDir(), "none"), Options{Tail: 3}), nil)
}

func TestTailLimit(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{Tail: MaxTail + 1}); err == nil || !strings.Contains(err.Error(), "tail") {
		t.Fatalf("tail over the limit: %v", err)
	}
}

// poll calls Next until want entries came (follow never says done).
func poll(t *testing.T, r *Reader, want int) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		es, done, err := r.Next(100, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			t.Fatal("a follow said done")
		}
		for _, e := range es {
			got = append(got, key(e))
		}
	}
	return got
}

func TestFollow(t *testing.T) {
	dir := sample(t)
	wl := filepath.Join(dir, contract.WorkloadLog)
	// Without follow, what is appended after Open is not read.
	r0, err := Open(dir, Options{Tail: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFile(t, wl, workloadJSON(t, 100, StreamOut, "late"))
	es, done, err := r0.Next(100, 1<<20)
	r0.Close()
	if err != nil || !done || len(es) != 1 || key(es[0]) != "audit@95:c.test" {
		t.Fatalf("non-follow after an append: %v done=%v err=%v", keys(es), done, err)
	}

	r, err := Open(dir, Options{Tail: 2, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	eq(t, "backlog", poll(t, r, 2), []string{"audit@95:c.test", "out@100:late"})
	if es, done, _ := r.Next(100, 1<<20); len(es) != 0 || done {
		t.Fatalf("nothing new: %v %v", es, done)
	}
	// A partial line waits for its end.
	half := workloadJSON(t, 110, StreamErr, "new")
	appendFile(t, wl, half[:10])
	if es, _, _ := r.Next(100, 1<<20); len(es) != 0 {
		t.Fatalf("a partial line was read: %v", es)
	}
	appendFile(t, wl, half[10:])
	eq(t, "appended", poll(t, r, 1), []string{"err@110:new"})

	// The audit file rotates (audit.File: FILE -> FILE.1, a new FILE): what
	// was written before the rename and after it both arrive.
	ap := filepath.Join(dir, contract.AuditLog)
	appendFile(t, ap, eventJSON(t, 120, audit.ClassNetwork, "before.test"))
	if err := os.Rename(ap, ap+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, ap, eventJSON(t, 130, audit.ClassNetwork, "after.test"))
	eq(t, "rotated", poll(t, r, 2), []string{"audit@120:before.test", "audit@130:after.test"})
	appendFile(t, ap, eventJSON(t, 140, audit.ClassNetwork, "after2.test"))
	eq(t, "after rotation", poll(t, r, 1), []string{"audit@140:after2.test"})

	// Reading from the start takes the rotated file first.
	all := readAll(t, dir, Options{AuditOnly: true})
	eq(t, "rotated history", all[len(all)-3:], []string{"audit@120:before.test", "audit@130:after.test", "audit@140:after2.test"})
	eq(t, "tail over a rotation", readAll(t, dir, Options{AuditOnly: true, Tail: 3}), all[len(all)-3:])
}

func TestFollowFileThatAppearsLater(t *testing.T) {
	dir := t.TempDir()
	r, err := Open(dir, Options{Follow: true, Since: at(50)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if es, done, _ := r.Next(10, 1<<20); len(es) != 0 || done {
		t.Fatalf("empty dir: %v %v", es, done)
	}
	appendFile(t, filepath.Join(dir, contract.WorkloadLog), workloadJSON(t, 10, StreamOut, "old")+workloadJSON(t, 60, StreamOut, "new"))
	eq(t, "appeared", poll(t, r, 1), []string{"out@60:new"})
}

func TestFormat(t *testing.T) {
	loc := time.FixedZone("X", 2*3600)
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, loc)
	today := time.Date(2025, 3, 4, 0, 0, 1, 5e6, loc)
	yesterday := today.Add(-2 * time.Second)
	cases := []struct {
		e    Entry
		full bool
		want string
	}{
		{Entry{Time: today, Source: SourceWorkload, Stream: StreamOut, Text: "hi\tthere"}, false, "00:00:01.005 out: hi\tthere"},
		{Entry{Time: today, Source: SourceWorkload, Stream: StreamErr, Text: "oops"}, false, "00:00:01.005 err: oops"},
		{Entry{Time: yesterday, Source: SourceWorkload, Stream: StreamErr, Text: "late"}, false, "2025-03-03 23:59:59.005 err: late"},
		{Entry{Time: today, Source: SourceAudit, Text: "NET:OPEN [MED] DENIED"}, true, "2025-03-04T00:00:01.005+02:00 NET:OPEN [MED] DENIED"},
		// The supervisor's marker has its own label; an unknown stream is out.
		{Entry{Time: today, Source: SourceWorkload, Stream: StreamStockade, Text: "5 lines of output dropped"}, false, "00:00:01.005 stockade: 5 lines of output dropped"},
		{Entry{Time: today, Source: SourceWorkload, Stream: "other", Text: "x"}, false, "00:00:01.005 out: x"},
		// What a workload prints cannot move the cursor or start a line.
		{Entry{Time: today, Source: SourceWorkload, Stream: StreamOut, Text: "a\x1b[2Jb\rc\u2028d\xff"}, false, `00:00:01.005 out: a\x1b[2Jb\x0dc\u2028d\xff`},
	}
	for _, c := range cases {
		if got := Format(c.e, now, c.full); got != c.want {
			t.Errorf("Format(%+v, full=%v) = %q, want %q", c.e, c.full, got, c.want)
		}
	}
}

func TestJSON(t *testing.T) {
	ev := `{"time":1741082400000,"class_uid":4001}`
	for _, c := range []struct {
		e    Entry
		keys []string
	}{
		{Entry{Time: base, Source: SourceWorkload, Stream: StreamErr, Text: "<x>"}, []string{"source", "stream", "text", "time"}},
		{Entry{Time: base, Source: SourceAudit, Text: "NET:OPEN", Event: json.RawMessage(ev)}, []string{"event", "source", "text", "time"}},
		{Entry{Time: base, Source: SourceLifecycle, Text: "LIFECYCLE", Event: json.RawMessage(`{broken`)}, []string{"source", "text", "time"}},
	} {
		b, err := JSON(c.e)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if strings.Join(keys, ",") != strings.Join(c.keys, ",") {
			t.Errorf("%s: keys %v, want %v", b, keys, c.keys)
		}
		if m["time"] != "2025-03-04T10:00:00.000Z" || m["text"] != c.e.Text {
			t.Errorf("%s: time or text", b)
		}
		if c.e.Source == SourceAudit && m["event"].(map[string]any)["class_uid"] != float64(4001) {
			t.Errorf("%s: event", b)
		}
	}
}

func keys(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, key(e))
	}
	return out
}
