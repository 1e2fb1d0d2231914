package cgroup

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// startIn runs script under sh inside g: the shell waits for a line on
// stdin until it has been moved in.
func startIn(t *testing.T, g Group, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(in, "go\n")
	return cmd
}

// TestLimits: a group with pids, memory and cpu limits stops a fork bomb
// at its pids limit, OOM-kills a memory hog (counted), and reports use.
func TestLimits(t *testing.T) {
	testenv.NeedRoot(t)
	name := fmt.Sprintf("stockade-test-%d", os.Getpid())
	g, err := New(name, Limits{Pids: 16, MemoryBytes: 64 << 20, CPUs: 0.5})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	removeAtEnd(t, g)
	// A fork bomb: 100 sleepers asked for, the group holds 16 processes.
	bomb := startIn(t, g, `for i in $(seq 100); do sleep 30 & done 2>/dev/null; sleep 30`)
	var u Usage
	testenv.Eventually(t, 10*time.Second, func() bool {
		u, err = g.Usage()
		return err == nil && u.Pids >= 10
	}, "the bomb to fill the group (usage %+v, %v)", &u, &err)
	time.Sleep(300 * time.Millisecond)
	if u, err = g.Usage(); err != nil || u.Pids > 16 {
		t.Fatalf("pids %d past the limit 16 (%v)", u.Pids, err)
	}
	_ = bomb.Process.Kill()
	_ = bomb.Wait() // a zombie counts in pids.current
	killAll(g)
	testenv.Eventually(t, 10*time.Second, func() bool { killAll(g); u, _ = g.Usage(); return u.Pids == 0 }, "the bomb to end (usage %+v)", &u)

	// A memory hog: tail keeps a line of 200 MiB of zeros.
	hog := startIn(t, g, `head -c 200m /dev/zero | tail -n1 > /dev/null`)
	err = hog.Wait()
	testenv.Eventually(t, 5*time.Second, func() bool { u, _ = g.Usage(); return u.OOMKills >= 1 }, "an OOM kill to be counted (usage %+v)", &u)
	if err == nil {
		t.Fatalf("the hog finished within 64 MiB")
	}
	t.Logf("hog: %v; usage %+v (%s)", err, u, g.Version())

	// The limits are what was asked.
	if g.Version() == "v1" {
		own, _ := ownGroups("/proc/self/cgroup")
		b, _ := os.ReadFile(filepath.Join(Root, "pids", own["pids"], name, "pids.max"))
		q, _ := os.ReadFile(filepath.Join(Root, "cpu", own["cpu"], name, "cpu.cfs_quota_us"))
		if strings.TrimSpace(string(b)) != "16" || strings.TrimSpace(string(q)) != "50000" {
			t.Fatalf("pids.max %q cfs_quota_us %q", b, q)
		}
	}
}

// TestNotDelegated: with nowhere to make a group, New says so (ErrNotEnforced).
func TestNotDelegated(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "cgroup")
	if err := os.WriteFile(self, []byte("4:memory:/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newAt(filepath.Join(dir, "nothing-mounted"), self, "s", Limits{Pids: 1})
	if err == nil || !strings.Contains(err.Error(), ErrNotEnforced.Error()) {
		t.Fatalf("err %v, want ErrNotEnforced", err)
	}
}

func killAll(g Group) {
	pids, _ := g.Procs()
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// TestIOThrottle: a group with IOBps 1 MiB/s on the disk of a temp dir
// takes about 2 s to write 2 MiB with O_DIRECT (the page cache would hide
// buffered writes from the throttle), and counts the bytes.
func TestIOThrottle(t *testing.T) {
	testenv.NeedRoot(t)
	dir := t.TempDir()
	dev, err := BlockDevice(dir)
	if err != nil {
		testenv.Unavailable(t, "no block device under %s: %v", dir, err)
	}
	g, err := New(fmt.Sprintf("stockade-io-test-%d", os.Getpid()), Limits{IOBps: 1 << 20, IODevice: dev})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	removeAtEnd(t, g)
	start := time.Now()
	w := startIn(t, g, "dd if=/dev/zero of="+filepath.Join(dir, "f")+" bs=256k count=8 oflag=direct 2>/dev/null")
	if err := w.Wait(); err != nil {
		t.Fatalf("dd: %v", err)
	}
	took := time.Since(start)
	u, err := g.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if took < 1200*time.Millisecond || u.IOBytes < 2<<20 {
		t.Fatalf("2 MiB at 1 MiB/s took %s, %d bytes counted", took, u.IOBytes)
	}
	t.Logf("2 MiB direct write at 1 MiB/s on %s: %s, %d bytes counted", dev, took.Round(time.Millisecond), u.IOBytes)
}

// removeAtEnd kills what is left in g and removes it when the test ends.
func removeAtEnd(t *testing.T, g Group) {
	t.Cleanup(func() {
		killAll(g)
		deadline := time.Now().Add(5 * time.Second)
		for g.Remove() != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	})
}
