package boundary

import (
	"net"
	"slices"
	"testing"
)

// TestSweepKeepsAliveFromTheSecondSweep: a connection is due for
// keep-alive at the first sweep after the one that first saw it, once; a
// removed one never is.
func TestSweepKeepsAliveFromTheSecondSweep(t *testing.T) {
	s := newConnSet()
	a, b, gone := &net.TCPConn{}, &net.TCPConn{}, &net.TCPConn{}
	s.add(a)
	s.add(gone)
	if due := s.sweep(); len(due) != 0 {
		t.Fatalf("first sweep: %d due, want none (nothing was seen before)", len(due))
	}
	s.add(b)
	s.remove(gone)
	if due := s.sweep(); !slices.Equal(due, []net.Conn{a}) {
		t.Fatalf("second sweep: %v due, want only the connection the first saw", due)
	}
	if due := s.sweep(); !slices.Equal(due, []net.Conn{b}) {
		t.Fatalf("third sweep: %v due, want only the one added after the first", due)
	}
	if due := s.sweep(); len(due) != 0 {
		t.Fatalf("fourth sweep: %d due, want none (each is kept alive once)", len(due))
	}
}
