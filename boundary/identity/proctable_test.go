package identity

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A held handle reads the process it was opened on: after an exec it reads
// the new exe, after the process is gone it fails, and the table then opens
// the pid afresh.
func TestProcHandleFollowsExecAndExit(t *testing.T) {
	sh, sleep := lookPath(t, "sh"), lookPath(t, "sleep")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sh, "-c", "read x; exec "+sleep+" 30")
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = r.Close()
	p := newProcFS("/proc", 0)
	defer p.t.reset()
	pid := cmd.Process.Pid
	before, err := p.exe(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pp, err := p.ppid(pid); err != nil || pp != os.Getpid() {
		t.Fatalf("ppid %d, %v; want %d", pp, err, os.Getpid())
	}
	held := p.t.peek(pid)
	if held == nil {
		t.Fatal("the table does not hold the process it read")
	}
	p.t.release(held, false)
	_, _ = w.WriteString("go\n")
	_ = w.Close()
	deadline := time.Now().Add(5 * time.Second)
	var after string
	for time.Now().Before(deadline) {
		if after, err = p.exe(pid); err == nil && after != before {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.HasSuffix(after, "/sleep") || after == before {
		t.Fatalf("exe after exec through the held handle: %q (before %q), want sleep", after, before)
	}
	h, err := p.t.acquire(pid)
	if err != nil || h != held {
		t.Fatalf("acquire after exec: %p, %v; want the same handle %p", h, err, held)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if pp, err := h.ppid(); err == nil {
		t.Fatalf("stat of a reaped process through its handle: ppid %d, no error", pp)
	} else if !exited(err) {
		t.Fatalf("stat of a reaped process: %v, want it recognised as exited", err)
	}
	p.t.release(h, true)
	if p.t.peek(pid) != nil {
		t.Fatal("an exited process stays in the table")
	}
	if h.dir != -1 || h.stat != -1 {
		t.Fatalf("released handle of an exited process keeps fds %d/%d", h.dir, h.stat)
	}
}

// The table holds at most maxHandles processes; a handle still acquired
// when it is evicted keeps its fds until it is released.
func TestProcTableBound(t *testing.T) {
	tb := newProcTable("/proc")
	self := os.Getpid()
	h, err := tb.acquire(self)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the table with placeholder entries (no fds), all used after self.
	for i := range maxHandles {
		tb.mu.Lock()
		tb.tick++
		tb.m[-1-i] = &procHandle{pid: -1 - i, dir: -1, stat: -1, sched: -1, status: -1, used: tb.tick}
		if len(tb.m) > maxHandles {
			tb.evictLocked()
		}
		tb.mu.Unlock()
	}
	tb.mu.Lock()
	size, inTable := len(tb.m), tb.m[self] == h
	tb.mu.Unlock()
	if size > maxHandles || inTable {
		t.Fatalf("table of %d entries, oldest still in: %v; want at most %d and the oldest evicted", size, inTable, maxHandles)
	}
	if h.dir < 0 {
		t.Fatal("an evicted handle still acquired lost its fds")
	}
	if _, err := h.ppid(); err != nil {
		t.Fatalf("read through an evicted but acquired handle: %v", err)
	}
	tb.release(h, false)
	if h.dir != -1 {
		t.Fatal("an evicted handle kept its fds after its release")
	}
}

// With process events, what the table read before is reused until an event
// says otherwise: an exec is seen at the next sync, and a parent's exit
// makes its child's parent read again (it was reparented).
func TestProcEventsKeepCacheExact(t *testing.T) {
	ev, p := eventsTable(t, eventsQueueBytes)
	sh, sleep := lookPath(t, "sh"), lookPath(t, "sleep")

	// parent: sh that starts a child sh, then waits for a line to exit;
	// the child waits for a line on its own pipe, then execs sleep.
	pr, pw, _ := os.Pipe()
	cr, cw, _ := os.Pipe()
	defer pw.Close()
	defer cw.Close()
	cmd := exec.Command(sh, "-c", `sh -c 'read x <&3; exec `+sleep+` 30' 3<&4 & echo $!; read y`)
	cmd.Stdin = pr
	cmd.ExtraFiles = []*os.File{nil, cr} // fd 4 in the parent
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pr.Close()
	cr.Close()
	var child int
	if _, err := fmt.Fscan(out, &child); err != nil || child <= 0 {
		t.Fatalf("child pid: %d, %v", child, err)
	}
	defer func() { _ = syscall.Kill(child, syscall.SIGKILL) }()

	ev.sync(p.t, nil, nil)
	exe0, err := p.exe(child)
	if err != nil {
		t.Fatal(err)
	}
	if pp, err := p.ppid(child); err != nil || pp != cmd.Process.Pid {
		t.Fatalf("child's parent %d, %v; want %d", pp, err, cmd.Process.Pid)
	}
	h := p.t.peek(child)
	p.t.mu.Lock()
	cached := h.hasExe && h.hasPpid
	p.t.mu.Unlock()
	p.t.release(h, false)
	if !cached {
		t.Fatal("with process events the table keeps what it read")
	}

	_, _ = cw.WriteString("go\n")
	waitFor(t, func() bool {
		ev.sync(p.t, nil, nil)
		exe, err := p.exe(child)
		return err == nil && exe != exe0 && strings.HasSuffix(exe, "/sleep")
	}, "the exec of the child to be seen")
	// Read (and so cache) the child's parent and the parent itself again.
	if pp, err := p.ppid(child); err != nil || pp != cmd.Process.Pid {
		t.Fatalf("child's parent %d, %v; want %d", pp, err, cmd.Process.Pid)
	}
	if _, err := p.exe(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}

	_, _ = pw.WriteString("go\n") // the parent exits; the child is reparented
	_ = cmd.Wait()
	waitFor(t, func() bool {
		ev.sync(p.t, nil, nil)
		pp, err := p.ppid(child)
		return err == nil && pp != cmd.Process.Pid
	}, "the child's new parent to be seen")
	if p.t.peek(cmd.Process.Pid) != nil {
		t.Fatal("the exited parent stays in the table")
	}
}

// eventsTable opens process events with a queue of queue bytes and a
// procFS whose table they vouch for; both are closed when the test ends.
func eventsTable(t *testing.T, queue int) (*procEvents, procFS) {
	t.Helper()
	requireRoot(t)
	ev, err := openProcEvents(time.Second, queue)
	if err != nil {
		unavailable(t, "process events: %v", err)
	}
	p := newProcFS("/proc", 0)
	p.t.events = ev
	t.Cleanup(func() { p.t.reset(); _ = ev.close() })
	return ev, p
}

func waitFor(t *testing.T, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With process events, a bounded candidate list is listed again only after
// a candidate forked a process (or one exited, or events were lost).
func TestCandidatesKeptUntilAFork(t *testing.T) {
	requireRoot(t)
	var calls int
	var mu sync.Mutex
	r := newResolver(t, WithPids(func() ([]int, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		return []int{os.Getpid()}, nil
	}))
	if err := r.ProcEvents(); err != nil {
		unavailable(t, "process events: %v", err)
	}
	listed := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	conn := pair(t, listen(t, "tcp4", "127.0.0.1:0"))
	checkSelf(t, resolve(t, r, conn))
	checkSelf(t, resolve(t, r, conn))
	if n := listed(); n != 1 {
		t.Fatalf("candidates listed %d times for two lookups with no fork, want 1", n)
	}
	if err := exec.Command(lookPath(t, "true")).Run(); err != nil { // a fork by the candidate
		t.Fatal(err)
	}
	checkSelf(t, resolve(t, r, conn))
	if n := listed(); n != 2 {
		t.Fatalf("candidates listed %d times after the candidate forked, want 2", n)
	}
}

// A scan through a handle reads last the fds that held no socket before,
// but still finds a socket that took such an fd's number.
func TestScanFindsSocketInFormerNonSocketFd(t *testing.T) {
	p := newProcFS("/proc", 0)
	defer p.t.reset()
	self := os.Getpid()
	h, err := p.t.acquire(self)
	if err != nil {
		t.Fatal(err)
	}
	defer p.t.release(h, false)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pipeFd := int(r.Fd())
	// A scan for an inode nobody holds reads every fd and learns the pipe.
	if fd, _, err := p.scanFds(self, 1, func(uint32, fdRef) {}); err != nil || fd != -1 {
		t.Fatalf("scan for no socket: fd %d, %v", fd, err)
	}
	if !h.wasNonSocket(pipeFd) {
		t.Fatalf("fd %d (a pipe) not learned as a non-socket", pipeFd)
	}
	// The pipe's number goes to a socket.
	ln := listen(t, "tcp4", "127.0.0.1:0")
	sfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(sfd, pipeFd, unix.O_CLOEXEC); err != nil { // replaces the pipe's read end
		t.Fatal(err)
	}
	_ = unix.Close(sfd)
	defer unix.Close(pipeFd)
	_ = r // its fd now names the socket; do not close it twice
	addr := ln.Addr().(*net.TCPAddr)
	if err := unix.Connect(pipeFd, &unix.SockaddrInet4{Port: addr.Port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(pipeFd, &st); err != nil {
		t.Fatal(err)
	}
	fd, got, err := p.scanFds(self, uint32(st.Ino), func(uint32, fdRef) {})
	p.t.release(got, false)
	if err != nil || fd != pipeFd {
		t.Fatalf("scan for the socket on a former pipe's fd %d: fd %d, %v", pipeFd, fd, err)
	}
	if h.wasNonSocket(pipeFd) {
		t.Fatal("the fd is still taken for a non-socket after the scan found a socket there")
	}
}

type lostWatcher struct{ lostN int }

func (w *lostWatcher) forked(int, int) {}
func (w *lostWatcher) exited(int)      {}
func (w *lostWatcher) lost()           { w.lostN++ }

// When the queue overflows between two lookups, the next sync forgets
// everything the table knew (and says events were lost).
func TestProcEventsOverflowForgetsAll(t *testing.T) {
	ev, p := eventsTable(t, 4096) // the kernel's minimum
	ev.sync(p.t, nil, nil)
	self := os.Getpid()
	if _, err := p.exe(self); err != nil {
		t.Fatal(err)
	}
	truePath := lookPath(t, "true")
	for range 64 { // 3+ events each (fork, exec, exit): more than the queue holds
		if err := exec.Command(truePath).Run(); err != nil {
			t.Fatal(err)
		}
	}
	w := &lostWatcher{}
	ev.sync(p.t, w, nil)
	h := p.t.peek(self)
	p.t.mu.Lock()
	kept := h.hasExe
	p.t.mu.Unlock()
	p.t.release(h, false)
	if w.lostN == 0 || kept {
		t.Fatalf("after an overflow: lost reported %d times, exe still kept %v; want lost and forgotten", w.lostN, kept)
	}
}
