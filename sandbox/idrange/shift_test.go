package idrange

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/testenv"
)

func owned(t *testing.T, p string) (uint32, uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid, st.Mode & 0o7777
}

func lchown(t *testing.T, p string, uid, gid int) {
	t.Helper()
	if err := os.Lchown(p, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// TestShift moves a legacy workspace (files of uids 100000+ inside the
// sandbox's 0..65535) into a new range: every file by offset, ids of
// neither range untouched, links not followed (the file a link points to
// outside keeps its owner), setuid kept, the root last; a second run walks
// nothing.
func TestShift(t *testing.T) {
	testenv.NeedRoot(t)
	base := t.TempDir()
	ws := filepath.Join(base, "workspace")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{ws, filepath.Join(ws, "a", "b")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"top": "t", "a/mid": "m", "a/b/deep": "d", "a/suid": "s", "hostfile": "h"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(outside, []byte("o"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	leg := int(Legacy().Base)
	for _, p := range []string{"", "a", "a/b", "top", "a/mid", "a/b/deep", "a/suid", "a/link", "fifo"} {
		lchown(t, filepath.Join(ws, p), leg+1000, leg+1000)
	}
	lchown(t, ws, leg, leg)
	lchown(t, filepath.Join(ws, "top"), leg+5, 0)  // gid not a sandbox's
	lchown(t, filepath.Join(ws, "hostfile"), 0, 0) // put there by host root
	lchown(t, outside, leg+7, leg+7)               // reachable only through the link
	if err := unix.Chmod(filepath.Join(ws, "a", "suid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	to := Range{Base: 0x70010000, Size: Size}
	st, err := Shift(ws, []Range{Legacy()}, to)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 10 || st.Moved != 9 {
		t.Errorf("stats %+v, want 10 files walked, 9 moved", st)
	}
	want := map[string][3]uint32{
		"":         {to.Base, to.Base, 0o755},
		"a":        {to.Base + 1000, to.Base + 1000, 0o755},
		"a/b/deep": {to.Base + 1000, to.Base + 1000, 0o644},
		"a/suid":   {to.Base + 1000, to.Base + 1000, 0o4755},
		"fifo":     {to.Base + 1000, to.Base + 1000, 0o600},
		"top":      {to.Base + 5, 0, 0o644},
		"hostfile": {0, 0, 0o644},
	}
	for p, w := range want {
		if u, g, m := owned(t, filepath.Join(ws, p)); u != w[0] || g != w[1] || m != w[2] {
			t.Errorf("%s: %d:%d %o, want %d:%d %o", p, u, g, m, w[0], w[1], w[2])
		}
	}
	if u, g, _ := owned(t, filepath.Join(ws, "a", "link")); u != to.Base+1000 || g != to.Base+1000 {
		t.Errorf("the link itself: %d:%d", u, g)
	}
	if u, g, _ := owned(t, outside); u != uint32(leg+7) || g != uint32(leg+7) {
		t.Errorf("the link was followed: its target outside is now %d:%d", u, g)
	}
	for name, data := range files {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != data {
			t.Errorf("%s after the shift: %q %v", name, b, err)
		}
	}
	// Complete: a second run changes and walks nothing.
	if st, err := Shift(ws, []Range{Legacy()}, to); err != nil || st != (ShiftStats{}) {
		t.Errorf("a second shift: %+v %v", st, err)
	}
	// Interrupted half-way (the root not yet moved): a rerun finishes it.
	lchown(t, ws, leg, leg)
	lchown(t, filepath.Join(ws, "a", "mid"), leg+3, leg+3)
	if st, err := Shift(ws, []Range{Legacy()}, to); err != nil || st.Moved != 2 {
		t.Errorf("resuming: %+v %v, want the root and a/mid moved", st, err)
	}
	if u, _, _ := owned(t, filepath.Join(ws, "a", "mid")); u != to.Base+3 {
		t.Errorf("a/mid after resuming: uid %d", u)
	}
	// A source that is not a sandbox's range is refused before anything moves.
	lchown(t, ws, 0, 0)
	if _, err := Shift(ws, []Range{{Base: 0, Size: Size}}, to); err == nil || !strings.Contains(err.Error(), "not a sandbox") {
		t.Errorf("shifting the host's ids: %v", err)
	}
	if u, _, _ := owned(t, filepath.Join(ws, "hostfile")); u != 0 {
		t.Errorf("hostfile moved to %d", u)
	}
	// The root itself a link: refused.
	link := filepath.Join(base, "wslink")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Shift(link, []Range{Legacy()}, to); err == nil {
		t.Error("Shift followed a link at the root")
	}
}
