package identity

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestQuietProcessReadAgainAfterRunning: a sandbox process asleep since its
// descriptors were read is not read again, until it runs: a shell that
// wakes, opens a connection and sleeps again is found as its owner. (With
// the count of runs ignored, the shell's old snapshot would hide it and
// the lookup would find no owner.)
func TestQuietProcessReadAgainAfterRunning(t *testing.T) {
	requireRoot(t)
	bash := lookPath(t, "bash")
	ln := listen(t, "tcp4", "127.0.0.1:0")
	sh := exec.Command(bash, "-c", `while read -r _; do exec 4<>/dev/tcp/127.0.0.1/$1; echo connected; done`, "quiet", port(ln))
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	pids := func() ([]int, error) { return []int{os.Getpid(), sh.Process.Pid}, nil }
	r := newResolver(t, WithPids(pids))
	if err := r.QuietProcesses(); err != nil {
		unavailable(t, "%v", err)
	}
	// Connections of this process: the shell is read (asleep in read),
	// and its snapshot kept.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if id := resolve(t, r, pair(t, ln)); id.Pid != os.Getpid() || id.Holders != nil {
			t.Fatalf("a connection of this process: %+v", id)
		}
		if r.proc.t.quietWithout(sh.Process.Pid, 1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeping shell never got a snapshot")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The shell runs: it opens a connection of its own, then sleeps again.
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "connected\n" {
		t.Fatalf("shell: %q, %v", line, err)
	}
	id := resolve(t, r, accept(t, ln))
	if id.Pid != sh.Process.Pid || id.Exe != bash {
		t.Fatalf("the shell's own connection: %+v, want pid %d (%s)", id, sh.Process.Pid, bash)
	}
}

// TestQuietSharedTable: a process whose descriptor table another task
// shares (here: this process and one of its threads) gets no snapshot; a
// child with a table of its own does. A kernel that does not count runs
// is refused.
func TestQuietSharedTable(t *testing.T) {
	tbl := newProcTable("/proc")
	h, err := tbl.acquire(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.release(h, false)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	tid := 0
	for _, e := range tasks {
		if n, _ := strconv.Atoi(e.Name()); n != os.Getpid() {
			tid = n
			break
		}
	}
	if tid == 0 {
		t.Fatal("no second thread in this Go process")
	}
	if h.unsharedAmong([]int{tid}) {
		t.Fatalf("thread %d shares this process's table, yet it is called unshared", tid)
	}
	child := exec.Command(lookPath(t, "sleep"), "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	if !h.unsharedAmong([]int{child.Process.Pid}) {
		t.Fatal("a child that exec'd has a table of its own, yet it is called shared")
	}
	if _, err := parseRuns([]byte("0 0 0\n")); err == nil {
		t.Fatal("a schedstat without a count of runs was accepted")
	}
}
