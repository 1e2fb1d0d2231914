package logs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/contract"
)

// current is a line in WorkloadHeader's form.
func current(ms int, stream byte, line string) string {
	return string(AppendWorkloadPrefix(nil, at(ms), stream)) + line + "\n"
}

// writeFile makes path holding s (replacing it).
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rotate moves FILE.i to FILE.i+1 (keep files kept) and FILE to FILE.1,
// and starts FILE with s, as the supervisor's logFile does.
func rotate(t *testing.T, path string, keep int, s string) {
	t.Helper()
	_ = os.Remove(path + "." + itoa(keep))
	for i := keep - 1; i >= 1; i-- {
		_ = os.Rename(path+"."+itoa(i), path+"."+itoa(i+1))
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path+".new", WorkloadHeader+s)
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// generations: workload.log.3 of an earlier supervisor (JSON lines),
// .2 and .1 and the live file in the current form.
func generations(t *testing.T) string {
	dir := t.TempDir()
	p := filepath.Join(dir, contract.WorkloadLog)
	writeFile(t, p+".3", workloadJSON(t, 0, StreamOut, "json0")+workloadJSON(t, 10, StreamErr, "json1"))
	writeFile(t, p+".2", WorkloadHeader+current(20, WorkloadOut, "g2a")+current(30, WorkloadErr, "g2b"))
	writeFile(t, p+".1", WorkloadHeader+current(40, WorkloadOut, "g1a")+current(50, WorkloadMarker, "3 lines of output dropped"))
	writeFile(t, p, WorkloadHeader+current(60, WorkloadOut, "live")+current(70, WorkloadOut, "live2"))
	return dir
}

// TestWorkloadGenerationsReadInOrder: the rotated files are read oldest
// first, each in its own form, then the live file; a tail and a since
// span the files; a marker is the stream "stockade".
func TestWorkloadGenerationsReadInOrder(t *testing.T) {
	dir := generations(t)
	all := []string{"out@0:json0", "err@10:json1", "out@20:g2a", "err@30:g2b", "out@40:g1a", "stockade@50:3 lines of output dropped",
		"out@60:live", "out@70:live2"}
	eq(t, "all", readAll(t, dir, Options{}), all)
	eq(t, "tail 5", readAll(t, dir, Options{Tail: 5}), all[3:])
	eq(t, "since 15", readAll(t, dir, Options{Since: at(15)}), all[2:])
	eq(t, "tail 7 since 25", readAll(t, dir, Options{Tail: 7, Since: at(25)}), all[3:])
}

// TestWorkloadCurrentForm: a line's text is whatever the workload wrote
// after the prefix (a forged prefix inside it stays text), bytes that are
// not UTF-8 become U+FFFD, lines not in the form are skipped; a file
// without the header is an earlier supervisor's, whatever its lines look
// like.
func TestWorkloadCurrentForm(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, contract.WorkloadLog)
	forged := string(AppendWorkloadPrefix(nil, at(99), WorkloadMarker)) + "0 lines dropped"
	writeFile(t, p, WorkloadHeader+current(1, WorkloadOut, forged)+current(2, WorkloadErr, "bad \xff\xfe byte")+
		"garbage\n"+"12x o no\n"+"3 q other stream\n"+current(4, WorkloadOut, ""))
	eq(t, "current", readAll(t, dir, Options{}), []string{"out@1:" + forged, "err@2:bad \uFFFD byte", "out@4:"})

	// No header: plain lines of an earlier supervisor (the file's time),
	// even one that looks like the current form.
	plain := t.TempDir()
	pp := filepath.Join(plain, contract.WorkloadLog)
	writeFile(t, pp, current(5, WorkloadMarker, "looks like a marker"))
	if err := os.Chtimes(pp, at(500), at(500)); err != nil {
		t.Fatal(err)
	}
	eq(t, "plain", readAll(t, plain, Options{}), []string{"out@500:" + strings.TrimSuffix(current(5, WorkloadMarker, "looks like a marker"), "\n")})
}

// TestFollowAcrossWorkloadRotations: a follow reads on through a
// rotation, and through several between two looks (the files rotated
// past it are read in order, before the live one), and through one that
// removed the file it was reading (what is left is newer).
func TestFollowAcrossWorkloadRotations(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, contract.WorkloadLog)
	writeFile(t, p, WorkloadHeader+current(0, WorkloadOut, "start"))
	r, err := Open(dir, Options{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	eq(t, "start", poll(t, r, 1), []string{"out@0:start"})

	// One rotation: the old file's last line, then the new file's.
	appendFile(t, p, current(10, WorkloadOut, "before"))
	rotate(t, p, 3, current(20, WorkloadOut, "after"))
	eq(t, "one rotation", poll(t, r, 2), []string{"out@10:before", "out@20:after"})

	// Three rotations between two looks: nothing is skipped.
	appendFile(t, p, current(30, WorkloadOut, "a"))
	rotate(t, p, 3, current(40, WorkloadOut, "b"))
	rotate(t, p, 3, current(50, WorkloadOut, "c"))
	rotate(t, p, 3, current(60, WorkloadOut, "d"))
	eq(t, "three rotations", poll(t, r, 4), []string{"out@30:a", "out@40:b", "out@50:c", "out@60:d"})

	// Four more: the file being read is rotated out (removed); the three
	// kept and the live one follow it.
	appendFile(t, p, current(70, WorkloadOut, "e"))
	for i, s := range []string{"f", "g", "h", "i"} {
		rotate(t, p, 3, current(80+10*i, WorkloadOut, s))
	}
	eq(t, "rotated out", poll(t, r, 5), []string{"out@70:e", "out@80:f", "out@90:g", "out@100:h", "out@110:i"})
	if es, _, _ := r.Next(100, 1<<20); len(es) != 0 {
		t.Fatalf("more after the live file: %v", keys(es))
	}
	appendFile(t, p, current(120, WorkloadOut, "j"))
	eq(t, "after all", poll(t, r, 1), []string{"out@120:j"})
	// The files read to their end are closed: a long follow holds the
	// live file of each source, not one per rotation it passed.
	for _, s := range r.srcs {
		if len(s.segs) != 1 {
			t.Fatalf("%s: %d files held after the rotations, want the live one", s.kind, len(s.segs))
		}
	}
}
