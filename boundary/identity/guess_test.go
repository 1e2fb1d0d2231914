package identity

import (
	"net"
	"os"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fdOf returns the fd number of a TCP connection of this process.
func fdOf(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestGuessReusedFd: a client's new socket at the fd of a connection it
// finished is found by the guess, through the held handle; a guess never
// names an fd that does not hold the socket asked for, and notes in the
// owner cache the sockets it read.
func TestGuessReusedFd(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	r := newResolver(t)
	client1, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	id1 := resolve(t, r, accept(t, ln))
	checkSelf(t, id1)
	f1 := fdOf(t, client1)
	_ = client1.Close()
	r.Ended(id1)
	client2, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	server2 := accept(t, ln)
	if f2 := fdOf(t, client2); f2 != f1 { // another fd was free first: put the socket at f1 too
		if err := unix.Dup3(f2, f1, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(f1)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(f1, &st); err != nil {
		t.Fatal(err)
	}
	if fd, h := r.proc.guess(os.Getpid(), uint32(st.Ino), r.cache.note); fd != f1 || h == nil {
		t.Fatalf("guess for the socket at fd %d: fd %d", f1, fd)
	} else {
		r.proc.t.release(h, false)
	}
	// Resolved (so guessed again) and not in the owner cache: a guess for
	// another socket reads it.
	r.proc.t.resolved.mark(uint32(st.Ino))
	r.cache.forget(uint32(st.Ino))
	if fd, h := r.proc.guess(os.Getpid(), uint32(st.Ino)+1, r.cache.note); fd != -1 || h != nil {
		t.Fatalf("guess for a socket nobody holds: fd %d", fd)
	}
	// What the missed guess read is in the owner cache, as a scan's reads
	// are: the lookup of that socket starts from it.
	if ref, ok := r.cache.get(uint32(st.Ino)); !ok || ref != (fdRef{pid: os.Getpid(), fd: f1}) {
		t.Fatalf("owner cache after a guess read the socket at fd %d: %+v, %v", f1, ref, ok)
	}
	checkSelf(t, resolve(t, r, server2))
}

// TestScanOrder: fds seen freed (their connection ended) and fds never
// seen first, lowest first; then connections still open (the one resolved
// or read the longest ago first), then sockets waiting for their lookup,
// then non-sockets. Guesses follow that order, freed and open sockets
// only.
func TestScanOrder(t *testing.T) {
	var s resolvedSet
	h := &procHandle{fds: map[int]fdMemo{}}
	s.mark(100)                                     // socket at fd 5, resolved first
	h.fds[5] = fdMemo{inode: 100, checked: s.now()} // read right after
	s.mark(200)                                     // socket at fd 3
	h.fds[3] = fdMemo{inode: 200, checked: s.now()} //
	s.mark(400)                                     // socket at fd 7, its connection ended
	h.fds[7] = fdMemo{inode: 400, checked: s.now()} //
	s.end(400)                                      //
	h.fds[4] = fdMemo{inode: 300, checked: s.now()} // a socket not resolved yet
	h.fds[0] = fdMemo{inode: 0, checked: s.now()}   // not a socket
	h.fds[5] = fdMemo{inode: 100, checked: s.now()} // fd 5 read again: still open, so after fd 3
	var got []int
	for _, k := range h.keys([]int{0, 3, 4, 5, 7, 9}, &s) {
		got = append(got, k.fd)
	}
	if want := []int{7, 9, 3, 5, 4, 0}; !slices.Equal(got, want) {
		t.Fatalf("scan order %v, want %v", got, want)
	}
	// Guesses: the ended connection's fd, then the open ones, the one read
	// the longest ago first; never a socket waiting for its lookup.
	for n, want := range [][]int{1: {7}, 2: {7, 3}, 3: {7, 3, 5}, 6: {7, 3, 5}} {
		if want == nil {
			continue
		}
		if g := h.guesses(nil, &s, n); !slices.Equal(g, want) {
			t.Errorf("guesses(n=%d) = %v, want %v", n, g, want)
		}
	}
	delete(h.fds, 7) // no connection ended: the open ones
	if g := h.guesses(nil, &s, 6); !slices.Equal(g, []int{3, 5}) {
		t.Fatalf("guesses with two connections open and none ended %v, want [3 5]", g)
	}
	clear(h.fds) // nothing known: no guess
	if g := h.guesses(nil, &s, 6); len(g) != 0 {
		t.Fatalf("guesses with nothing known %v, want none", g)
	}
}
