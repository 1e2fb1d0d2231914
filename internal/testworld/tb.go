package testworld

import (
	"context"
	"os"
	"path/filepath"
	"time"
)

// TB is the part of testing.TB that Start and Dir use; a *testing.T or
// *testing.B is one. (An interface of its own keeps "testing" out of the
// packages that link this one into the stockade binary.)
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
}

// stopGrace is how long Start's cleanup waits after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// Start starts s for a test and fails the test when it does not become
// ready. s.Dir defaults to a fresh Dir(t, s.UID). At cleanup the process
// is stopped (SIGTERM, 15 s, SIGKILL) and, if the test failed, this
// start's log is logged.
func Start(t TB, s Spec) *Process {
	t.Helper()
	if s.Dir == "" {
		s.Dir = Dir(t, s.UID)
	}
	p, err := StartProcess(context.Background(), s)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		_ = p.Stop(stopGrace)
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", p.name, p.Log.Path(), p.Log)
		}
	})
	return p
}

// Dir is a fresh temporary directory a process running as uid can use:
// it and its parent (t.TempDir's is 0700) are 0755 and, for a uid other
// than 0, it is owned by uid (and its group uid).
func Dir(t TB, uid int) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatalf("testworld: %v", err)
		}
	}
	if uid != 0 {
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatalf("testworld: %v (running as another user needs root)", err)
		}
	}
	return d
}
