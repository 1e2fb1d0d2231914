package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Never two supervisors on one workspace: the second lock is refused with
// the holder's pid, and the lock is free again once the first is closed.
func TestSandboxLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockSandbox(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, LockFile))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", b)
	}
	if _, err := lockSandbox(dir, "a"); err == nil || !strings.Contains(err.Error(), "another supervisor of sandbox a runs (pid "+strconv.Itoa(os.Getpid())+")") {
		t.Fatalf("second lock: %v", err)
	}
	_ = first.Close()
	again, err := lockSandbox(dir, "a")
	if err != nil {
		t.Fatalf("lock after the first closed: %v", err)
	}
	_ = again.Close()
}
