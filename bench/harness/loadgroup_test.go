package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// TestRunCmdInGroup: a load started in a group runs in it (every
// controller the sandbox's group has), and the group is empty after it.
func TestRunCmdInGroup(t *testing.T) {
	testenv.NeedRoot(t)
	name := fmt.Sprintf("stockade-bench-test-%d", os.Getpid())
	g, err := cgroup.New(name, cgroup.Limits{})
	if err != nil {
		testenv.Unavailable(t, "no control group: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The shell reads its own membership after a moment: it is moved in
	// right after it starts.
	out, err := runCmdIn(ctx, t.TempDir(), g, "/bin/sh", "-c", "sleep 0.2; cat /proc/$$/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := 1 // v2: one line
	if g.Version() == "v1" {
		want = 4 // memory, pids, cpu, cpuacct at least
	}
	if n := strings.Count(string(out), "/"+name+"\n"); n < want {
		t.Fatalf("the load is in %d of the group's hierarchies, want %d:\n%s", n, want, out)
	}
	if procs, err := g.Procs(); err != nil || len(procs) != 0 {
		t.Fatalf("after the load: procs %v, %v", procs, err)
	}
}

// refusingGroup is a group that refuses every process.
type refusingGroup struct{ cgroup.Group }

func (refusingGroup) Add(int) error { return errors.New("cgroup.procs: permission denied") }

// TestRunCmdInRefused: a load that cannot be put in its group is killed
// before it does its work, and the error says why.
func TestRunCmdInRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := runCmdIn(ctx, t.TempDir(), refusingGroup{}, "/bin/sh", "-c", "sleep 3; echo ran")
	if err == nil || !strings.Contains(err.Error(), "put in its cgroup: cgroup.procs: permission denied") {
		t.Fatalf("err = %v", err)
	}
	if len(out) != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("the load ran anyway (%q after %s)", out, time.Since(start))
	}
}
