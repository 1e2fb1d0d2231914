package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/sandbox/spec"
)

// TestHoldHostIDs: as root a spec without a range is refused (no shared
// default); a range another sandbox's supervisor holds is a
// CannotStartError naming it, and nothing was moved; the sandbox's own
// range is held while the supervisor runs, after the workspace's files
// were moved out of the range of earlier versions.
func TestHoldHostIDs(t *testing.T) {
	testenv.NeedRoot(t)
	state := t.TempDir()
	dir := filepath.Join(state, "sandboxes", "s")
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(ws, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, file} {
		if err := os.Chown(p, 100000+7, 100000+7); err != nil {
			t.Fatal(err)
		}
	}
	claims := filepath.Join(t.TempDir(), "ids")
	r := idrange.Range{Base: 0x70020000, Size: idrange.Size}
	sp := spec.Supervisor{Name: "s", Workspace: ws, IDClaims: claims, ShiftIDs: []idrange.Range{idrange.Legacy()}}
	if _, err := holdHostIDs(sp, dir, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "no host id range") {
		t.Fatalf("a spec without a range: %v", err)
	}
	sp.HostIDs = &r
	// Another sandbox (another state dir) runs with r.
	otherWS := filepath.Join(t.TempDir(), "workspace")
	if err := os.Mkdir(otherWS, 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := idrange.NewClaims(claims).Hold(r, idrange.Owner{StateDir: "/other", Sandbox: "o", Workspace: otherWS, Pid: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = holdHostIDs(sp, dir, zerolog.Nop())
	var cs *CannotStartError
	if !errors.As(err, &cs) || !strings.Contains(cs.Reason, "in use by sandbox o of state dir /other") {
		t.Fatalf("a range another sandbox holds: %v", err)
	}
	owner := func() uint32 {
		var st syscall.Stat_t
		if err := syscall.Stat(file, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	if got := owner(); got != 100007 {
		t.Errorf("the refused start moved the workspace's files (uid %d)", got)
	}
	other.Close()
	if err := os.RemoveAll(otherWS); err != nil { // that sandbox deleted
		t.Fatal(err)
	}
	ids, err := holdHostIDs(sp, dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ids.close()
	if ids.r != r {
		t.Errorf("held %v, want %v", ids.r, r)
	}
	if got := owner(); got != r.Base+7 {
		t.Errorf("the workspace's file is owned by %d, want %d (moved by offset)", got, r.Base+7)
	}
	// Held: another sandbox cannot have it now.
	if _, err := idrange.NewClaims(claims).Hold(r, idrange.Owner{StateDir: "/other", Sandbox: "o2", Workspace: ws}); err == nil {
		t.Error("a second sandbox took the held range")
	}
}
