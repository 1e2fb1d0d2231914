package supervisor

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWorkspaceWalkStaysInside plays a workload that swaps a directory of
// its workspace for a link to a host directory while the supervisor (host
// root) sums the workspace: the host directory's big file must never be
// counted (a walk by path lists and sizes it whenever the swap lands
// between the listing and the descent).
func TestWorkspaceWalkStaysInside(t *testing.T) {
	ws, host := t.TempDir(), t.TempDir()
	const big = 1 << 40 // sparse: a size no workspace file here has
	f, err := os.Create(filepath.Join(host, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(big); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a, tmp := filepath.Join(ws, "a"), filepath.Join(ws, "a.tmp")
	if err := os.Mkdir(a, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, tmp); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() { // the workload: a, a directory, swapped with a link to host and back
		defer close(done)
		for !stop.Load() {
			_ = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, tmp, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { stop.Store(true); <-done }()
	for i := 0; i < 3000; i++ {
		if n := workspaceBytes(ws, 1000); n >= big {
			t.Fatalf("walk %d counted %d bytes: it followed the workload's link to %s", i, n, host)
		}
	}
}
