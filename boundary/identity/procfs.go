package identity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procFS reads the process tables under a proc mount, through held
// handles (procTable) for the processes it meets again and again.
type procFS struct {
	root string
	// stopAt ends ancestor walks below this pid (0: walk to pid 1).
	stopAt int
	t      *procTable
	// cursor is the last pid allocated in the numbering of the pids read
	// under root, as of after pids were listed; 0 when unknown (the seam
	// the ordering tests set).
	cursor func(pids []int) int
}

func newProcFS(root string, stopAt int) procFS {
	p := procFS{root: root, stopAt: stopAt, t: newProcTable(root), cursor: func([]int) int { return 0 }}
	// loadavg names the last pid of the reader's pid namespace, not of the
	// proc mount's: it numbers the pids under the host's /proc only.
	if root == "/proc" {
		p.cursor = func([]int) int { return p.lastPid() }
	}
	return p
}

func (p procFS) path(pid int, rest string) string {
	return p.root + "/" + strconv.Itoa(pid) + "/" + rest
}

// allPids lists every process (thread group) in the proc mount.
func (p procFS) allPids() ([]int, error) {
	f, err := os.Open(p.root)
	if err != nil {
		return nil, fmt.Errorf("identity: list processes: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("identity: list processes: %w", err)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// lastPid is the last pid allocated (the final field of loadavg), used to
// order pids newest first across a pid wrap-around. 0 when unknown.
func (p procFS) lastPid() int {
	b, err := os.ReadFile(p.root + "/loadavg")
	if err != nil {
		return 0
	}
	b = bytes.TrimSpace(b)
	pid, _ := strconv.Atoi(string(b[bytes.LastIndexByte(b, ' ')+1:]))
	return pid
}

// newestFirst sorts pids from most to least recently allocated: those at or
// below the allocation cursor descending, then those above it (allocated
// before the last wrap-around) descending.
func newestFirst(pids []int, cursor int) {
	slices.SortFunc(pids, func(a, b int) int {
		if wa, wb := cursor > 0 && a > cursor, cursor > 0 && b > cursor; wa != wb {
			if wa {
				return 1
			}
			return -1
		}
		return b - a
	})
}

// socketInode parses a "socket:[N]" fd link target.
func socketInode(link []byte) (uint32, bool) {
	const pre = "socket:["
	if len(link) < len(pre)+2 || string(link[:len(pre)]) != pre || link[len(link)-1] != ']' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(link[len(pre):len(link)-1]), 10, 32)
	return uint32(v), err == nil
}

// fdHolds reports whether fd of pid is (still) the socket with that inode,
// read through pid's held handle: the answer is about the process the
// handle is bound to. On success the handle is returned acquired (the
// caller releases it).
func (p procFS) fdHolds(ref fdRef, inode uint32) (*procHandle, bool) {
	for try := 0; try < 2; try++ {
		h, err := p.t.acquire(ref.pid)
		if err != nil {
			return nil, false
		}
		if p.handleHolds(h, ref.fd, inode) {
			return h, true
		}
		// A closed fd, or a handle of an exited process that the pid has
		// been reused since (without process events nothing dropped it):
		// then open the pid afresh once.
		_, err = h.ppid()
		dead := err != nil && exited(err)
		p.t.release(h, dead)
		if !dead {
			return nil, false
		}
	}
	return nil, false
}

// handleHolds reports whether fd of h's process is the socket with inode.
func (p procFS) handleHolds(h *procHandle, fd int, inode uint32) bool {
	var buf [64]byte
	n, err := readlinkFd(h.dir, "fd/", fd, buf[:])
	if err != nil {
		return false
	}
	got, ok := socketInode(buf[:n])
	return ok && got == inode
}

// readlinkFd is readlinkat(dir, prefix+fd, buf) with the path built on the
// stack: unix.Readlinkat takes a string and copies it to the heap, two
// allocations per link read with the number's formatting.
func readlinkFd(dir int, prefix string, fd int, buf []byte) (int, error) {
	var path [32]byte
	p := append(path[:0], prefix...)
	p = strconv.AppendInt(p, int64(fd), 10)
	p = append(p, 0)
	if len(buf) == 0 || len(p) > len(path) {
		return 0, unix.EINVAL
	}
	n, _, errno := unix.Syscall6(unix.SYS_READLINKAT, uintptr(dir), uintptr(unsafe.Pointer(&p[0])),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// scanFds reads the fd links of pid, passing each socket to seen, until it
// finds the one that holds target; it returns that fd (-1 if none). The
// directory is read with getdents into one buffer and each link with
// readlinkat on the directory fd: no per-entry path or name allocation.
// When the table holds pid, the scan reads through its handle and, if it
// finds target, returns that handle acquired (the caller releases it): the
// fd found is then known to belong to that very process. A scan alone does
// not open a handle (a miss may scan every process of the host).
func (p procFS) scanFds(pid int, target uint32, seen func(inode uint32, ref fdRef)) (int, *procHandle, error) {
	dfd := -1
	h := p.t.peek(pid)
	if h != nil {
		var err error
		if dfd, err = unix.Openat(h.dir, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			// The held process is gone; pid may be another one now.
			p.t.release(h, exited(err))
			h, dfd = nil, -1
		}
	}
	if dfd < 0 {
		var err error
		if dfd, err = unix.Open(p.path(pid, "fd"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return -1, nil, err
		}
	}
	fd, err := scanDir(dfd, pid, target, seen, h, &p.t.resolved)
	_ = unix.Close(dfd)
	if h != nil && (err != nil || fd < 0) {
		p.t.release(h, false)
		h = nil
	}
	return fd, h, err
}

// scanDir reads the fd links under dfd until target. With a handle, the
// fds are read in the order most likely to find a new socket first
// (fdClass: fds it has not seen or saw freed, lowest first, then those of
// connections still open, then those whose socket waits for its lookup,
// then non-sockets), and what this scan reads is kept. Once target is found,
// the fds that may hold a socket not seen yet (fdFree) are still read:
// they are most often connections about to be looked up, which then find
// their owner in the cache (passed to seen).
func scanDir(dfd, pid int, target uint32, seen func(inode uint32, ref fdRef), h *procHandle, resolved *resolvedSet) (int, error) {
	var (
		dirents [8192]byte
		fds     []int
	)
	for {
		n, err := unix.ReadDirent(dfd, dirents[:])
		if err != nil {
			return -1, err
		}
		if n <= 0 {
			break
		}
		for b := dirents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if fd, ok := atoiBytes(name); ok { // not "." or ".."
				fds = append(fds, fd)
			}
		}
	}
	var (
		learned []fdLink
		free    = len(fds) // fds that may hold a socket not seen yet (fdFree; without a handle: all)
	)
	if h != nil {
		keys := h.keys(fds, resolved)
		free = 0
		for i, k := range keys {
			fds[i] = k.fd
			if k.class == fdFree {
				free++
			}
		}
		defer func() { h.learn(fds, learned, resolved.now()) }()
	}
	found := -1
	var link [64]byte
	for i, fd := range fds {
		if found >= 0 && i >= free {
			break // the rest were read before
		}
		m, err := readlinkFd(dfd, "", fd, link[:])
		if err != nil {
			continue // closed meanwhile
		}
		inode, ok := socketInode(link[:m])
		learned = append(learned, fdLink{fd: fd, inode: inode})
		switch {
		case !ok:
		case inode == target:
			found = fd
		default:
			seen(inode, fdRef{pid: pid, fd: fd})
		}
	}
	return found, nil
}

// atoiBytes parses a non-negative decimal fd number.
func atoiBytes(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// exe reads /proc/<pid>/exe through pid's held handle.
func (p procFS) exe(pid int) (string, error) {
	var exe string
	err := p.withHandle(pid, func(h *procHandle) (err error) {
		exe, err = p.t.exe(h)
		return err
	})
	return exe, err
}

// ppid reads the parent pid from pid's stat through its held handle.
func (p procFS) ppid(pid int) (int, error) {
	var pp int
	err := p.withHandle(pid, func(h *procHandle) (err error) {
		pp, err = p.t.ppid(h)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("identity: %s: %w", p.path(pid, "stat"), err)
	}
	return pp, nil
}

// withHandle runs read on pid's held handle. A handle found dead (its
// process exited; without process events nothing dropped it) leaves the
// table, and pid, which may be another process now, is opened afresh once.
func (p procFS) withHandle(pid int, read func(*procHandle) error) error {
	for try := 0; ; try++ {
		h, err := p.t.acquire(pid)
		if err != nil {
			return err
		}
		err = read(h)
		// ENOENT from a link may be a live process without one: only a
		// failed read of its stat says it is gone.
		dead := err != nil && exited(err) && !h.alive()
		p.t.release(h, dead)
		if !dead || try == 1 {
			return err
		}
	}
}

// ancestorsOf walks the ppid chain from the process h is bound to,
// collecting each parent's exe, until ppid 0 (pid 1 or a pid namespace's
// root seen from its own proc mount), an unreadable process, or
// MaxAncestors entries. Every step reads through held handles what
// process events do not vouch for (its parent and its exe): a reparented
// process or an exec in the chain is seen.
func (p procFS) ancestorsOf(h *procHandle) []string {
	first := true
	return p.walk(h.pid, func(pid int) (int, error) {
		if first {
			first = false
			return p.t.ppid(h)
		}
		return p.ppid(pid)
	})
}

func (p procFS) walk(pid int, parent func(int) (int, error)) []string {
	// Most chains are short: they are gathered on the stack and copied
	// once, at their length (append's growth took two or three copies).
	var buf [8]string
	out := buf[:0]
	for len(out) < MaxAncestors {
		pp, err := parent(pid)
		if err != nil || pp <= 0 || pp == p.stopAt {
			break
		}
		exe, err := p.exe(pp)
		if err != nil {
			break
		}
		out = append(out, exe)
		pid = pp
	}
	switch {
	case len(out) == 0:
		return nil
	case cap(out) > len(buf):
		return out // outgrew buf: already on the heap
	}
	return slices.Clone(out)
}

// fdRef names one fd of one process.
type fdRef struct {
	pid, fd int
}

const (
	cacheGeneration = 4096 // socket inodes per cache generation
	ownerHints      = 8    // recent owner pids tried before the others
)

// ownerCache remembers which fd of which process held each socket inode seen
// by a scan (two generations, so it stays bounded), and the pids that owned
// recently resolved sockets. Entries are hints: every hit is re-validated.
type ownerCache struct {
	mu       sync.Mutex
	cur, old map[uint32]fdRef
	hints    []int
}

func newOwnerCache() *ownerCache {
	return &ownerCache{cur: map[uint32]fdRef{}, old: map[uint32]fdRef{}}
}

func (c *ownerCache) get(inode uint32) (fdRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.cur[inode]; ok {
		return r, true
	}
	r, ok := c.old[inode]
	return r, ok
}

// put records several inodes at once (one lock per scanned process).
func (c *ownerCache) put(entries map[uint32]fdRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for inode, r := range entries {
		c.putLocked(inode, r)
	}
}

// note records one inode (what a guess read).
func (c *ownerCache) note(inode uint32, r fdRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(inode, r)
}

func (c *ownerCache) putLocked(inode uint32, r fdRef) {
	if len(c.cur) >= cacheGeneration {
		c.old, c.cur = c.cur, make(map[uint32]fdRef, cacheGeneration)
	}
	c.cur[inode] = r
}

func (c *ownerCache) forget(inode uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, inode)
	delete(c.old, inode)
}

// owned moves pid to the front of the recent owners.
func (c *ownerCache) owned(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.hints, pid); i >= 0 {
		c.hints = slices.Delete(c.hints, i, i+1)
	}
	c.hints = slices.Insert(c.hints, 0, pid)
	if len(c.hints) > ownerHints {
		c.hints = c.hints[:ownerHints]
	}
}

// recent returns the recent owner pids, most recent first.
func (c *ownerCache) recent() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.hints)
}

// order puts the recent owners present in pids first, the rest after them in
// their given order.
func (c *ownerCache) order(pids []int) []int {
	c.mu.Lock()
	hints := slices.Clone(c.hints)
	c.mu.Unlock()
	out := make([]int, 0, len(pids))
	for _, h := range hints {
		if slices.Contains(pids, h) {
			out = append(out, h)
		}
	}
	for _, p := range pids {
		if !slices.Contains(hints, p) {
			out = append(out, p)
		}
	}
	return out
}

func (c *ownerCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur, c.old, c.hints = map[uint32]fdRef{}, map[uint32]fdRef{}, nil
}

var errOwnerGone = errors.New("owner changed during lookup")
