package boundary

import (
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// TestIdleConnsBounds: the stack hands out the most recent actor first,
// refuses an actor beyond its bound and every actor once closed, and its
// gauge follows what waits.
func TestIdleConnsBounds(t *testing.T) {
	var gauge atomic.Int64
	s := newIdleConns(2, &gauge)
	a, b, c := actor.NewPID("x", "conn/1"), actor.NewPID("x", "conn/2"), actor.NewPID("x", "conn/3")
	if s.pop() != nil {
		t.Fatal("pop of an empty stack returned an actor")
	}
	if !s.push(a) || !s.push(b) {
		t.Fatal("push under the bound refused")
	}
	if s.push(c) {
		t.Fatal("push beyond the bound accepted: that actor should stop instead")
	}
	if gauge.Load() != 2 {
		t.Fatalf("gauge %d, want 2", gauge.Load())
	}
	if got := s.pop(); got != b {
		t.Fatalf("pop returned %v, want the most recent (%v)", got, b)
	}
	if gauge.Load() != 1 {
		t.Fatalf("gauge %d after a pop, want 1", gauge.Load())
	}
	s.close()
	if gauge.Load() != 0 || s.pop() != nil {
		t.Fatalf("after close: gauge %d, an actor still handed out", gauge.Load())
	}
	if s.push(c) {
		t.Fatal("push after close accepted: the proxy actor is stopping")
	}
}
