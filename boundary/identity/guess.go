package identity

import (
	"slices"
	"sync"
)

// Guessing a new socket's fd. A client that keeps opening connections (an
// agent, a load generator) gets each new socket at its lowest free fd (the
// kernel's rule), most often the fd of a connection it has finished: one
// this boundary resolved, whose tunnel has ended (Netlink.Ended) or is
// about to (the client closed it before this boundary saw the end). So,
// before listing a recent owner's fds, a lookup reads the fds whose
// connection ended, lowest first, then those of connections still open,
// the one read the longest ago first. A hit is exact (the link is read
// through the held handle of that very process); a miss falls back to the
// full scan, which reads first the fds most likely to have changed. Every
// socket a guess reads goes to the owner cache, as a scan's do: with many
// clients connecting at once, one lookup's reads pass the sockets the next
// ones look for.

// maxGuesses bounds the fds read before listing a recent owner's fds. At
// 16 clients of one process, 6 guesses leave about one lookup in 17 to a
// full scan (2 guesses: one in 6); a client whose new sockets never land
// on a known fd pays at most 6 link reads more per lookup.
const maxGuesses = 6

// resolvedMemory bounds the resolved sockets remembered.
const resolvedMemory = 4096

// resolvedSet remembers which sockets were resolved and which of their
// connections have ended (Netlink.Ended), and keeps the clock that stamps
// what a handle reads of its fds (fdMemo.checked).
type resolvedSet struct {
	mu    sync.Mutex
	clock uint64
	ended map[uint32]bool // resolved sockets: has the connection ended
	ring  [resolvedMemory]uint32
	next  int
}

// now advances the clock and returns it.
func (s *resolvedSet) now() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	return s.clock
}

// mark records that inode was resolved, and returns the clock (now).
func (s *resolvedSet) mark(inode uint32) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended == nil {
		s.ended = map[uint32]bool{}
	}
	if _, ok := s.ended[inode]; !ok {
		if old := s.ring[s.next]; old != 0 {
			delete(s.ended, old)
		}
		s.ring[s.next] = inode
		s.next = (s.next + 1) % resolvedMemory
	}
	s.ended[inode] = false
	s.clock++
	return s.clock
}

// end records that the connection of a resolved socket has ended.
func (s *resolvedSet) end(inode uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ended[inode]; ok {
		s.ended[inode] = true
	}
}

// socketState is what the set knows of a socket.
type socketState uint8

const (
	socketUnresolved socketState = iota // never resolved (or forgotten)
	socketOpen                          // resolved, its connection open
	socketEnded                         // resolved, its connection ended
)

// lookup returns what the set knows of each of inodes.
func (s *resolvedSet) lookup(inodes []uint32, out []socketState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ino := range inodes {
		switch ended, ok := s.ended[ino]; {
		case !ok:
			out[i] = socketUnresolved
		case ended:
			out[i] = socketEnded
		default:
			out[i] = socketOpen
		}
	}
}

// fdClass orders a scan by how likely an fd is to hold a new socket. The
// kernel gives a new socket the lowest free fd, so fds this boundary saw
// freed (their connection ended) and fds it has never seen come first,
// lowest first; then fds of connections still open (the one resolved or
// read the longest ago first), then sockets still waiting for their
// lookup (their client waits for the answer, so the fd is unchanged),
// then non-sockets.
type fdClass int

const (
	fdFree fdClass = iota // ended, or never seen
	fdResolved
	fdPending
	fdNonSocket
)

// fdKey is one fd's place in a scan's order.
type fdKey struct {
	fd    int
	class fdClass
	seq   uint64 // when it was last read (fdResolved; at least when resolved)
	ended bool   // its connection ended (fdFree)
}

// keys classifies fds by what h knows of them and sorts them (fdClass).
func (h *procHandle) keys(fds []int, s *resolvedSet) []fdKey {
	keys := make([]fdKey, len(fds))
	inodes := make([]uint32, len(fds))
	checked := make([]uint64, len(fds))
	h.fdMu.Lock()
	for i, fd := range fds {
		m, known := h.fds[fd]
		keys[i] = fdKey{fd: fd, class: fdFree}
		switch {
		case known && m.inode == 0:
			keys[i].class = fdNonSocket
		case known:
			keys[i].class = fdPending
			inodes[i], checked[i] = m.inode, m.checked
		}
	}
	h.fdMu.Unlock()
	states := make([]socketState, len(fds))
	s.lookup(inodes, states)
	for i := range keys {
		switch {
		case keys[i].class != fdPending:
		case states[i] == socketEnded:
			keys[i].class, keys[i].ended = fdFree, true
		case states[i] == socketOpen:
			keys[i].class, keys[i].seq = fdResolved, checked[i]
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// compareKeys orders fds for a scan: by class, then the one read the
// longest ago, then the lowest.
func compareKeys(a, b fdKey) int {
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
}

// guesses appends to dst up to n fds of h where a new socket most likely
// is, in the order the comment at the top of this file gives (the order of
// keys, freed and open sockets only). It runs on every lookup of a recent
// owner, so it keeps to the stack for a client of up to 64 fds.
func (h *procHandle) guesses(dst []int, s *resolvedSet, n int) []int {
	type memo struct {
		fd      int
		inode   uint32
		checked uint64
	}
	var (
		memoBuf [64]memo
		keyBuf  [64]fdKey
	)
	memos := memoBuf[:0]
	h.fdMu.Lock()
	for fd, m := range h.fds {
		if m.inode != 0 {
			memos = append(memos, memo{fd: fd, inode: m.inode, checked: m.checked})
		}
	}
	h.fdMu.Unlock()
	keys := keyBuf[:0]
	s.mu.Lock()
	for _, m := range memos {
		switch ended, resolved := s.ended[m.inode]; {
		case !resolved: // waiting for its lookup: the fd is unchanged
		case ended:
			keys = append(keys, fdKey{fd: m.fd, class: fdFree, ended: true})
		default:
			keys = append(keys, fdKey{fd: m.fd, class: fdResolved, seq: m.checked})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(keys, compareKeys)
	for _, k := range keys[:min(n, len(keys))] {
		dst = append(dst, k.fd)
	}
	return dst
}

// guess reads the fds of pid's held handle that most likely hold a new
// socket (guesses) and returns the one holding target with the handle,
// acquired (the caller releases it), or -1 and nil. It tells seen of
// every socket it reads, as a scan does.
func (p procFS) guess(pid int, target uint32, seen func(inode uint32, ref fdRef)) (int, *procHandle) {
	h := p.t.peek(pid)
	if h == nil {
		return -1, nil
	}
	var buf [maxGuesses]int
	for _, fd := range h.guesses(buf[:0], &p.t.resolved, maxGuesses) {
		var link [64]byte
		n, err := readlinkFd(h.dir, "fd/", fd, link[:])
		ino, ok := uint32(0), false
		if err == nil {
			ino, ok = socketInode(link[:n])
		}
		h.remember(fd, ino, err == nil, p.t.resolved.now())
		if ok {
			seen(ino, fdRef{pid: pid, fd: fd})
		}
		if ok && ino == target {
			return fd, h
		}
	}
	p.t.release(h, false)
	return -1, nil
}
