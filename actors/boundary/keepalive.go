package boundary

import (
	"net"
	"sync"
	"time"
)

// connSet tracks open connections so that a stopping listener actor closes
// them: proxy clients and DNS-over-TCP streams (Boundary.live, streams)
// and the conn actors' upstream connections, a tunnel's or a plain HTTP
// request's, from the dial to the actor's cleanup (Boundary.upstreams).
// On the upstreams the proxy actor's keep-alive sweeps (every
// Config.KeepAliveSweep) turn TCP keep-alive on for those that lived
// through a whole sweep period.
//
// Why not at the dial: keep-alive is two setsockopt calls, about 1% of a
// short tunnel's CPU, and it only matters to a connection idle long
// enough for a probe (keepAliveIdle); one open across two sweeps gets it,
// so with the default period a probe goes out at most 15 s later than if
// it had been set at the dial (with a period P, up to 2P-15 s later). A
// client's own keep-alive cannot find a dead upstream (the boundary
// answers its probes), so the boundary's must.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]sweepState
}

// sweepState is how far a connection is in the keep-alive sweeps.
type sweepState uint8

const (
	sweepNew  sweepState = iota // no sweep has seen it yet
	sweepSeen                   // one sweep saw it: the next turns keep-alive on
	sweepKept                   // keep-alive is on
)

// keepAliveIdle is how long an upstream is idle before its first
// keep-alive probe (Go's dialer default); the kernel's interval and count
// follow.
const keepAliveIdle = 15 * time.Second

func newConnSet() *connSet { return &connSet{m: map[net.Conn]sweepState{}} }

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.m[c] = sweepNew
	s.mu.Unlock()
}

// remove forgets c; it does not close it (its owner does, once: a second
// Close costs an error value).
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *connSet) closeAll() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		_ = c.Close()
	}
}

// sweep marks every connection it has not seen before and returns those
// an earlier sweep saw, now counted as kept alive: the caller turns
// keep-alive on for them (keepAlive), outside the set's lock.
func (s *connSet) sweep() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []net.Conn
	for c, st := range s.m {
		switch st {
		case sweepNew:
			s.m[c] = sweepSeen
		case sweepSeen:
			s.m[c] = sweepKept
			due = append(due, c)
		}
	}
	return due
}

// keepAlive turns TCP keep-alive on for c: the first probe after
// keepAliveIdle of silence, the kernel's interval and count after it (the
// options Go's dialer would have set by default). A connection closed
// meanwhile returns an error, ignored: it needs no probes.
func keepAlive(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	return tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: -1, Count: -1})
}
