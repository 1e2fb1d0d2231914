package boundary

import (
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// idleActors is the stack of leaf actors of one kind that finished a piece
// of work and wait for the next: conn actors that served a connection to
// its end (the accept loop pops), DNS batch actors that answered a batch
// (the dns actor pops). An actor pushes itself as the last thing it does
// for a piece of work; the most recently used comes first (its worker's
// stack and caches are the warmest). An actor that failed never pushes
// itself: its supervisor stops it. At most max wait: a burst's actors do
// not all stay.
type idleActors[A any] struct {
	mu      sync.Mutex
	waiting []idleActor[A]
	max     int
	closed  bool
	gauge   *atomic.Int64 // how many wait, for the metrics; may be nil
}

// idleActor is a waiting actor: its PID to send the work to, and the actor
// itself, whose job slot the work goes into first.
type idleActor[A any] struct {
	pid *actor.PID
	a   *A
}

func newIdleActors[A any](max int, gauge *atomic.Int64) *idleActors[A] {
	return &idleActors[A]{max: max, gauge: gauge}
}

// pop takes the most recent idle actor; false when none waits.
func (s *idleActors[A]) pop() (idleActor[A], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.waiting)
	if n == 0 {
		return idleActor[A]{}, false
	}
	w := s.waiting[n-1]
	s.waiting[n-1] = idleActor[A]{}
	s.waiting = s.waiting[:n-1]
	s.count(-1)
	return w, true
}

// push offers an actor for the next piece of work; false when the stack is
// full or its parent is stopping (the actor then stops).
func (s *idleActors[A]) push(w idleActor[A]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.waiting) >= s.max {
		return false
	}
	s.waiting = append(s.waiting, w)
	s.count(1)
	return true
}

// close refuses every later push and forgets the waiting actors (they stop
// with their parent).
func (s *idleActors[A]) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.count(-int64(len(s.waiting)))
	s.waiting = nil
}

func (s *idleActors[A]) count(d int64) {
	if s.gauge != nil {
		s.gauge.Add(d)
	}
}
