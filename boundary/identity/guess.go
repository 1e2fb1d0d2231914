package identity

import (
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Guessing a new socket's fd. A client that keeps opening connections (an
// agent, a load generator) gets each new socket at its lowest free fd (the
// kernel's rule), most often the fd of a connection it has finished: one
// this boundary resolved a while ago. So, before listing a recent owner's
// fds, a lookup reads the few fds whose last known socket was resolved the
// longest ago. A hit is exact (the link is read through the held handle of
// that very process); a miss falls back to the full scan, which reads
// first the fds most likely to have changed.

// maxGuesses bounds the fds read before listing a recent owner's fds.
const maxGuesses = 1

// resolvedMemory bounds the resolved sockets remembered (their order only).
const resolvedMemory = 4096

// resolvedSet remembers the order in which sockets were resolved.
type resolvedSet struct {
	mu   sync.Mutex
	seq  uint64
	m    map[uint32]uint64
	ring [resolvedMemory]uint32
	next int
}

// now returns the set's clock (it moves with each resolution and read).
func (s *resolvedSet) now() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// mark records that inode was resolved now.
func (s *resolvedSet) mark(inode uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint32]uint64{}
	}
	s.seq++
	if _, ok := s.m[inode]; !ok {
		if old := s.ring[s.next]; old != 0 {
			delete(s.m, old)
		}
		s.ring[s.next] = inode
		s.next = (s.next + 1) % resolvedMemory
	}
	s.m[inode] = s.seq
}

// seqs returns when each of inodes was resolved (0: not remembered).
func (s *resolvedSet) seqs(inodes []uint32, out []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ino := range inodes {
		out[i] = s.m[ino]
	}
}

// fdClass orders a scan: fds unknown to the handle (new since its last
// scan) first, then those whose socket was resolved (the one resolved or
// last read the longest ago first: its connection has most likely ended
// and the fd been reused), then those whose socket is still waiting for
// its lookup (its client is waiting for the answer, so the fd is
// unchanged), then non-sockets.
type fdClass int

const (
	fdUnknown fdClass = iota
	fdResolved
	fdPending
	fdNonSocket
)

// fdKey is one fd's place in a scan's order.
type fdKey struct {
	fd    int
	class fdClass
	seq   uint64 // when its socket was resolved (fdResolved)
}

// keys classifies fds by what h knows of them and sorts them (fdClass).
func (h *procHandle) keys(fds []int, s *resolvedSet) []fdKey {
	keys := make([]fdKey, len(fds))
	inodes := make([]uint32, len(fds))
	checked := make([]uint64, len(fds))
	h.fdMu.Lock()
	for i, fd := range fds {
		m, known := h.fds[fd]
		keys[i] = fdKey{fd: fd, class: fdUnknown}
		switch {
		case known && m.inode == 0:
			keys[i].class = fdNonSocket
		case known:
			keys[i].class = fdPending
			inodes[i], checked[i] = m.inode, m.checked
		}
	}
	h.fdMu.Unlock()
	seqs := make([]uint64, len(fds))
	s.seqs(inodes, seqs)
	for i := range keys {
		if keys[i].class == fdPending && seqs[i] > 0 {
			keys[i].class, keys[i].seq = fdResolved, max(seqs[i], checked[i])
		}
	}
	slices.SortFunc(keys, func(a, b fdKey) int {
		if a.class != b.class {
			return int(a.class) - int(b.class)
		}
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return a.fd - b.fd
	})
	return keys
}

// guesses returns up to n fds of h whose last known socket was resolved,
// the longest ago first.
func (h *procHandle) guesses(s *resolvedSet, n int) []int {
	h.fdMu.Lock()
	var fds []int
	for fd, m := range h.fds {
		if m.inode != 0 {
			fds = append(fds, fd)
		}
	}
	h.fdMu.Unlock()
	var out []int
	for _, k := range h.keys(fds, s) {
		if k.class != fdResolved || len(out) == n {
			break
		}
		out = append(out, k.fd)
	}
	return out
}

// guess reads the fds of pid's held handle that most likely hold a new
// socket (guesses) and returns the one holding target with the handle,
// acquired (the caller releases it), or -1 and nil.
func (p procFS) guess(pid int, target uint32) (int, *procHandle) {
	h := p.t.peek(pid)
	if h == nil {
		return -1, nil
	}
	for _, fd := range h.guesses(&p.t.resolved, maxGuesses) {
		var link [64]byte
		n, err := unix.Readlinkat(h.dir, "fd/"+strconv.Itoa(fd), link[:])
		ino, ok := uint32(0), false
		if err == nil {
			ino, ok = socketInode(link[:n])
		}
		h.remember(fd, ino, err == nil, p.t.resolved.now())
		if ok && ino == target {
			return fd, h
		}
	}
	p.t.release(h, false)
	return -1, nil
}
