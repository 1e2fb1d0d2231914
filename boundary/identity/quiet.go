package identity

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Quiet processes. A holder scan reads every descriptor of every process
// of a sandbox on each connection, and most of those processes are asleep
// (a shell waiting for its child, a sleep). A process's descriptor table
// changes only through system calls of the tasks that share it (open,
// close, dup, accept, a unix socket's SCM_RIGHTS, clone) or a seccomp
// listener's ADDFD (the workload's filter refuses listeners:
// sandbox/nsrun). The kernel counts each time a task is put on a CPU
// (/proc/PID/schedstat, third field). So a single-threaded process that
// shares its table with no other process, was off every CPU while its
// descriptors were read, and whose count has not moved since, holds
// exactly what was read then: its scan is skipped. A new thread or a
// process sharing the table can only come from the process itself, which
// would have to run; a fork event clears what was known anyway.

// kcmpFiles is KCMP_FILES (linux/kcmp.h): do two processes share one
// descriptor table.
const kcmpFiles = 2

// quietSnap is what a scan read of a process that stayed off every CPU
// during it.
type quietSnap struct {
	runs    uint64   // times put on a CPU, read after the scan
	sockets []uint32 // the socket inodes its descriptors held
}

// runs returns how many times h's process (its main thread) has been put
// on a CPU.
func (h *procHandle) runs() (uint64, error) {
	fd, err := h.held(&h.sched, "schedstat")
	if err != nil {
		return 0, err
	}
	var buf [96]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return 0, err
	}
	return parseRuns(buf[:n])
}

// parseRuns returns the third field of a schedstat line ("exec_ns
// wait_ns runs"). 0 means the kernel does not count (no sched_info): a
// process that exists has run at least once.
func parseRuns(b []byte) (uint64, error) {
	rest := b
	for range 2 { // skip exec_ns and wait_ns
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return 0, fmt.Errorf("schedstat %q: %w", b, errMalformedStat)
		}
		rest = rest[i+1:]
	}
	rest = bytes.TrimRight(rest, "\n")
	n, ok := uint64(0), len(rest) > 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			ok = false
			break
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !ok:
		return 0, fmt.Errorf("schedstat %q: %w", b, errMalformedStat)
	case n == 0:
		return 0, fmt.Errorf("schedstat %q: no count of runs", b)
	}
	return n, nil
}

// asleepAlone reports whether h's process has one thread and is neither
// running nor runnable now (its stat's state and num_threads).
func (h *procHandle) asleepAlone() bool {
	var buf [512]byte
	n, err := unix.Pread(h.stat, buf[:], 0)
	if err != nil || n == 0 {
		return false
	}
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(b[i+1:]) // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime priority nice num_threads
	if len(f) < 18 || len(f[0]) != 1 {
		return false
	}
	switch f[0][0] {
	case 'S', 'D', 'T', 't', 'I':
	default:
		return false // running or runnable (R), or exiting
	}
	return string(f[17]) == "1"
}

// quietWithout reports whether pid is known not to hold inode without
// reading its descriptors: its handle has a snapshot, the process has not
// been on a CPU since, and the snapshot has no such socket.
func (t *procTable) quietWithout(pid int, inode uint32) bool {
	h := t.peek(pid)
	if h == nil {
		return false
	}
	defer t.release(h, false)
	h.fdMu.Lock()
	s := h.quiet
	h.fdMu.Unlock()
	if s == nil {
		return false
	}
	if n, err := h.runs(); err != nil || n != s.runs {
		h.fdMu.Lock()
		if h.quiet == s {
			h.quiet = nil
		}
		h.fdMu.Unlock()
		return false
	}
	return !slices.Contains(s.sockets, inode)
}

// forked clears what is known of pid's descriptor table (it forked: a
// child may share the table).
func (t *procTable) forked(pid int) {
	t.mu.Lock()
	h, ok := t.m[pid]
	t.mu.Unlock()
	if !ok {
		return
	}
	h.fdMu.Lock()
	h.forks++
	h.quiet, h.unshared = nil, false
	h.fdMu.Unlock()
}

// unshared reports whether no process among cands shares h's descriptor
// table (kcmp). Once checked it holds until h's process forks.
func (h *procHandle) unsharedAmong(cands []int) bool {
	h.fdMu.Lock()
	ok, forks := h.unshared, h.forks
	h.fdMu.Unlock()
	if ok {
		return true
	}
	for _, c := range cands {
		if c == h.pid {
			continue
		}
		r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(h.pid), uintptr(c), kcmpFiles, 0, 0, 0)
		switch {
		case errno == unix.ESRCH:
			continue // gone
		case errno != 0 || r == 0:
			return false // shared, or cannot tell
		}
	}
	h.fdMu.Lock()
	if h.forks == forks {
		h.unshared = true
	}
	h.fdMu.Unlock()
	return true
}

// scanQuiet scans pid for inode as scanFds does and, when pid does not
// hold it and stayed off every CPU during the scan, keeps what the scan
// read as pid's snapshot (see quietWithout). cands are the sandbox's
// processes (the possible sharers of pid's table).
func (p procFS) scanQuiet(pid int, inode uint32, note func(uint32, fdRef), cands []int) (int, *procHandle, error) {
	h, err := p.t.acquire(pid)
	if err != nil {
		return -1, nil, err
	}
	defer p.t.release(h, false)
	// One thread and off the CPUs first (a busy or threaded process, as
	// an owner often is, costs one read), then the count of runs.
	asleep := h.asleepAlone()
	var before uint64
	if asleep {
		before, err = h.runs()
		asleep = err == nil
	}
	var sockets []uint32
	fd, held, err := p.scanFds(pid, inode, func(ino uint32, ref fdRef) {
		sockets = append(sockets, ino)
		note(ino, ref)
	})
	if err != nil || fd >= 0 || !asleep {
		return fd, held, err
	}
	if after, err := h.runs(); err == nil && after == before && h.unsharedAmong(cands) {
		h.fdMu.Lock()
		h.quiet = &quietSnap{runs: after, sockets: sockets}
		h.fdMu.Unlock()
	}
	return fd, held, err
}

// runsCounted checks that the kernel counts a task's turns on a CPU:
// this thread's count must grow across a sleep.
func runsCounted() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	read := func() (uint64, error) {
		b, err := os.ReadFile("/proc/thread-self/schedstat")
		if err != nil {
			return 0, err
		}
		return parseRuns(b)
	}
	a, err := read()
	if err != nil {
		return fmt.Errorf("identity: quiet processes: %w", err)
	}
	time.Sleep(2 * time.Millisecond)
	b, err := read()
	if err != nil {
		return fmt.Errorf("identity: quiet processes: %w", err)
	}
	if b <= a {
		return errors.New("identity: quiet processes: the kernel's count of runs did not grow across a sleep")
	}
	return nil
}
