package identity

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxHandles bounds the processes the table holds open (two fds each, a
// third for a sandbox's quiet processes, a fourth for an inspected one's
// status).
const maxHandles = 256

// procHandle is one process held open by two fds bound to the process
// itself, not to its pid number: its /proc/PID directory (O_PATH, for
// readlinkat of "exe" and "fd/N" and for opening "fd") and its stat file
// (read again with pread). Once the process is gone both only fail (ESRCH
// or ENOENT), even after its pid number is reused, so a held handle can
// never describe another process. An exec keeps the handle and changes
// what "exe" reads: what was read is kept only while process events vouch
// for it (see procTable.exe).
type procHandle struct {
	pid  int
	dir  int // O_PATH fd of /proc/PID
	stat int // fd of /proc/PID/stat

	// Guarded by procTable.mu.
	refs int    // acquirers that have not released it
	gone bool   // out of the table; the fds close when refs reach 0
	used uint64 // table tick of the last acquire
	// What was read of the process, kept only while process events vouch
	// for it (procTable.events): an exec or exit event bumps epoch and
	// clears them, and a read stores its result only if epoch has not
	// moved since the read began.
	epoch   uint64
	exeC    string
	exeErr  error // the exe link of a live process that cannot be read (pid 1 of some VMs)
	ppidC   int
	hasExe  bool
	hasPpid bool
	execC   Exec // what the process runs (image.go)
	hasExec bool
	// The verdict on its mappings (tamper.go), for the exec it was made
	// on.
	tamperWhy string
	tamperFor Exec
	hasTamper bool
	// When the process started: it never changes for the process the
	// handle is bound to, so it is kept whatever events say.
	startC   time.Duration
	hasStart bool

	// What the last reads through the handle found at each fd: a
	// socket's inode, or 0 for anything else (stdio, pipes, the event
	// poll: they seldom change). It orders scans and guesses (guess.go);
	// every fd is still read before a scan says "not found".
	fdMu sync.Mutex
	fds  map[int]fdMemo
	// Quiet processes (quiet.go), guarded by fdMu: the schedstat fd
	// (opened when first needed; -1 before), the last snapshot, whether
	// no other process shares the table, and the forks seen, which end it.
	sched    int
	quiet    *quietSnap
	unshared bool
	forks    uint64
	// status is the fd of /proc/PID/status (its tracer, tamper.go),
	// opened when first needed; -1 before. Guarded by fdMu.
	status int
}

// wasNonSocket reports whether fd held no socket when last read.
func (h *procHandle) wasNonSocket(fd int) bool {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	m, ok := h.fds[fd]
	return ok && m.inode == 0
}

// fdMemo is what an fd held when last read, and when (resolvedSet.now).
type fdMemo struct {
	inode   uint32
	checked uint64
}

// fdLink is what one fd's link read: a socket's inode, or 0.
type fdLink struct {
	fd    int
	inode uint32
}

// learn records what a scan read (read) of the fds it listed (listed) at
// now: fds no longer listed are forgotten.
func (h *procHandle) learn(listed []int, read []fdLink, now uint64) {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	if h.fds == nil || len(h.fds) > 4096 { // a process with that many files: start over
		h.fds = map[int]fdMemo{}
	}
	if len(h.fds) > 0 {
		open := make(map[int]bool, len(listed))
		for _, fd := range listed {
			open[fd] = true
		}
		for fd := range h.fds {
			if !open[fd] {
				delete(h.fds, fd)
			}
		}
	}
	for _, l := range read {
		h.fds[l.fd] = fdMemo{inode: l.inode, checked: now}
	}
}

// remember records what fd held when read at now (open false: it was
// closed).
func (h *procHandle) remember(fd int, inode uint32, open bool, now uint64) {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	switch {
	case !open:
		delete(h.fds, fd)
	case h.fds == nil:
		h.fds = map[int]fdMemo{fd: {inode: inode, checked: now}}
	default:
		h.fds[fd] = fdMemo{inode: inode, checked: now}
	}
}

// procTable holds recently used processes open so that identifying the
// next connection of the same client (or of a process with the same
// ancestors) reads each process with one pread and one readlinkat instead
// of opening, reading and closing its files by path.
type procTable struct {
	root string
	// events, when set, keeps the exe and parent of held processes valid
	// between reads: see procEvents.
	events *procEvents
	mu     sync.Mutex
	m      map[int]*procHandle
	tick   uint64
	// resolved orders the sockets resolved (guess.go).
	resolved resolvedSet
}

func newProcTable(root string) *procTable {
	return &procTable{root: root, m: map[int]*procHandle{}}
}

// acquire returns the held handle of pid, opening it when absent. Release
// it when done.
func (t *procTable) acquire(pid int) (*procHandle, error) {
	t.mu.Lock()
	t.tick++
	if h, ok := t.m[pid]; ok {
		h.refs++
		h.used = t.tick
		t.mu.Unlock()
		return h, nil
	}
	t.mu.Unlock()
	dir, err := unix.Open(t.root+"/"+strconv.Itoa(pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	stat, err := unix.Openat(dir, "stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(dir)
		return nil, err
	}
	h := &procHandle{pid: pid, dir: dir, stat: stat, sched: -1, status: -1, refs: 1}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.m[pid]; ok { // opened meanwhile by another lookup
		h.close()
		old.refs++
		old.used = t.tick
		return old, nil
	}
	if len(t.m) >= maxHandles {
		t.evictLocked()
	}
	h.used = t.tick
	t.m[pid] = h
	return h, nil
}

// peek returns pid's handle, acquired, only if the table holds it.
func (t *procTable) peek(pid int) *procHandle {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.m[pid]
	if !ok {
		return nil
	}
	h.refs++
	return h
}

// evictLocked drops the least recently used handle.
func (t *procTable) evictLocked() {
	var lru *procHandle
	for _, h := range t.m {
		if lru == nil || h.used < lru.used {
			lru = h
		}
	}
	if lru != nil {
		t.dropLocked(lru)
	}
}

func (t *procTable) dropLocked(h *procHandle) {
	if t.m[h.pid] == h {
		delete(t.m, h.pid)
	}
	if !h.gone {
		h.gone = true
		if h.refs == 0 {
			h.close()
		}
	}
}

// release gives back an acquired handle (nil: nothing). gone says the process was found
// exited: the handle leaves the table so that the pid, when reused, is
// opened afresh.
func (t *procTable) release(h *procHandle, gone bool) {
	if h == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h.refs--
	if gone {
		t.dropLocked(h)
	}
	if h.gone && h.refs == 0 {
		h.close()
	}
}

// forget drops what is known of pid (an exec or exit event); for an exit,
// the handle leaves the table, and its children's parents are forgotten
// (they are reparented).
func (t *procTable) forget(pid int, exit bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.m[pid]; ok {
		h.invalidate()
		if exit {
			t.dropLocked(h)
		}
	}
	if exit {
		for _, h := range t.m {
			if h.hasPpid && h.ppidC == pid {
				h.invalidate()
			}
		}
	}
}

// forgetAll drops everything known (events were lost).
func (t *procTable) forgetAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.m {
		h.invalidate()
	}
}

func (h *procHandle) invalidate() {
	h.epoch++
	h.hasExe, h.hasPpid, h.exeC, h.exeErr, h.ppidC = false, false, "", nil, 0
	h.hasExec, h.execC = false, Exec{}
	h.hasTamper, h.tamperWhy, h.tamperFor = false, "", Exec{}
	h.fdMu.Lock()
	h.quiet = nil
	h.fdMu.Unlock()
}

// exe returns h's exe, from what events vouch for or read now. A live
// process whose link cannot be read (a kernel thread, or an init whose
// binary is gone) keeps that error like a value.
func (t *procTable) exe(h *procHandle) (string, error) {
	if t.events == nil {
		return h.exe()
	}
	t.mu.Lock()
	exe, exeErr, ok, epoch := h.exeC, h.exeErr, h.hasExe, h.epoch
	t.mu.Unlock()
	if ok {
		return exe, exeErr
	}
	exe, err := h.exe()
	if err != nil && !h.alive() {
		return "", err
	}
	t.mu.Lock()
	if h.epoch == epoch {
		h.exeC, h.exeErr, h.hasExe = exe, err, true
	}
	t.mu.Unlock()
	return exe, err
}

// alive reports whether h's process can still be read.
func (h *procHandle) alive() bool {
	_, err := h.ppid()
	return err == nil || !exited(err)
}

// ppid returns h's parent pid, from what events vouch for or read now.
func (t *procTable) ppid(h *procHandle) (int, error) {
	return vouched(t, h, func(h *procHandle) (*int, *bool) { return &h.ppidC, &h.hasPpid }, h.ppid)
}

// vouched returns what read returns for h's process: the value kept in
// h (slot gives its place and its "kept" flag, guarded by t.mu) while
// process events vouch for it, else read now and kept unless an event
// about the process came meanwhile (h's epoch moved). Without events it
// always reads.
func vouched[T any](t *procTable, h *procHandle, slot func(*procHandle) (*T, *bool), read func() (T, error)) (T, error) {
	if t.events == nil {
		return read()
	}
	t.mu.Lock()
	v, ok := slot(h)
	val, has, epoch := *v, *ok, h.epoch
	t.mu.Unlock()
	if has {
		return val, nil
	}
	val, err := read()
	if err != nil {
		return val, err
	}
	t.mu.Lock()
	if h.epoch == epoch {
		v, ok := slot(h)
		*v, *ok = val, true
	}
	t.mu.Unlock()
	return val, nil
}

// reset closes every handle no lookup holds (tests).
func (t *procTable) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range t.m {
		t.dropLocked(h)
	}
}

func (h *procHandle) close() {
	if h.dir >= 0 {
		_ = unix.Close(h.dir)
		_ = unix.Close(h.stat)
		h.dir, h.stat = -1, -1
	}
	if h.sched >= 0 {
		_ = unix.Close(h.sched)
		h.sched = -1
	}
	if h.status >= 0 {
		_ = unix.Close(h.status)
		h.status = -1
	}
}

// held returns the descriptor of the process's file name kept in *slot
// (one of h's fds guarded by fdMu), opening it when first needed.
func (h *procHandle) held(slot *int, name string) (int, error) {
	h.fdMu.Lock()
	defer h.fdMu.Unlock()
	if *slot < 0 {
		fd, err := unix.Openat(h.dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		*slot = fd
	}
	return *slot, nil
}

// exe reads the process's exe link (may end in " (deleted)").
func (h *procHandle) exe() (string, error) {
	var buf [512]byte
	n, err := unix.Readlinkat(h.dir, "exe", buf[:])
	if err != nil {
		return "", err
	}
	if n < len(buf) {
		return string(buf[:n]), nil
	}
	big := make([]byte, unix.PathMax)
	if n, err = unix.Readlinkat(h.dir, "exe", big); err != nil {
		return "", err
	}
	return string(big[:n]), nil
}

// ppid reads the parent pid from the held stat file ("pid (comm) S ppid
// ..."; comm may hold spaces and parentheses, so parse after the last ')').
func (h *procHandle) ppid() (int, error) {
	var buf [512]byte
	b, err := h.afterComm(buf[:])
	if err != nil {
		return 0, err
	}
	// After ") " come the state (one letter), a space, then ppid.
	const i = 3
	if i >= len(b) {
		return 0, errMalformedStat
	}
	j := i + bytes.IndexByte(b[i:], ' ')
	if j < i {
		return 0, errMalformedStat
	}
	pp, ok := atoiBytes(b[i:j])
	if !ok {
		return 0, errMalformedStat
	}
	return pp, nil
}

// afterComm reads the held stat file into buf and returns what follows
// the comm's closing parenthesis (from the space before the state).
func (h *procHandle) afterComm(buf []byte) ([]byte, error) {
	n, err := unix.Pread(h.stat, buf, 0)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errExited
	}
	i := bytes.LastIndexByte(buf[:n], ')')
	if i < 0 {
		return nil, errMalformedStat
	}
	return buf[i+1 : n], nil
}

var errMalformedStat = errors.New("malformed stat")

// errExited marks a read that failed because the process is gone.
var errExited = errors.New("process exited")

// exited reports whether err from a handle's read means the process is gone.
func exited(err error) bool {
	return errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, errExited)
}
