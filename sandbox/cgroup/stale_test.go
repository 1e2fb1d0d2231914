package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestRemoveNamedLeftBehind: a group a killed supervisor left (its last
// process gone a moment later) is removed from every hierarchy; one that
// is not there is no error.
func TestRemoveNamedLeftBehind(t *testing.T) {
	testenv.NeedRoot(t)
	name := SandboxGroup("left", t.TempDir())
	g, err := New(name, Limits{Pids: 10})
	if err != nil {
		testenv.Unavailable(t, "no cgroup: %v", err)
	}
	t.Cleanup(func() { killAll(g); _ = g.Remove() })
	cmd := startIn(t, g, "exec sleep 30")
	go func() { time.Sleep(300 * time.Millisecond); _ = cmd.Process.Kill() }()
	if err := RemoveNamed(name, 5*time.Second); err != nil {
		t.Fatalf("remove: %v", err)
	}
	dirs := groupDirs(g)
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", dir, err)
		}
	}
	if len(dirs) == 0 {
		t.Fatal("the group had no directory")
	}
	if err := RemoveNamed(name, time.Second); err != nil {
		t.Fatalf("a group not there: %v", err)
	}
}

// groupDirs are the directories of g in each hierarchy.
func groupDirs(g Group) []string {
	switch g := g.(type) {
	case *v1:
		var out []string
		for _, d := range g.dirs {
			out = append(out, d)
		}
		return out
	case *v2:
		return []string{g.dir}
	}
	return nil
}

// TestRemoveNamedBusy: a group whose processes stay is left in place and
// the error names it, after the wait (a fake hierarchy: a group with a file
// in it cannot be removed, as a busy one cannot).
func TestRemoveNamedBusy(t *testing.T) {
	root := t.TempDir()
	self := filepath.Join(root, "self")
	if err := os.WriteFile(self, []byte("4:memory:/outer\n8:pids:/outer\n1:name=systemd:/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"memory/outer/g", "pids/outer/g"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busy := filepath.Join(root, "memory/outer/g/cgroup.procs")
	if err := os.WriteFile(busy, []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := removeNamedAt(root, self, "g", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "memory/outer/g")) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	if _, err := os.Stat(filepath.Join(root, "pids/outer/g")); !os.IsNotExist(err) {
		t.Fatalf("the empty hierarchy's group stays: %v", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Fatalf("the busy group was touched: %v", err)
	}
	for _, bad := range []string{"", "..", "a/b", "."} {
		if err := removeNamedAt(root, self, bad, 0); err == nil {
			t.Errorf("name %q: want an error", bad)
		}
	}
}

// TestSandboxGroup: one name per sandbox and gateway.
func TestSandboxGroup(t *testing.T) {
	a, b := SandboxGroup("a", "/var/lib/stockade/sandboxes/a"), SandboxGroup("a", "/tmp/other/sandboxes/a")
	if a == b || !strings.HasPrefix(a, "stockade-a-") || len(a) != len("stockade-a-")+8 {
		t.Fatalf("%q, %q", a, b)
	}
}
