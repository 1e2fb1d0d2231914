package boundary

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TestIdleConnsBounds: the stack hands out the most recent actor first,
// refuses an actor beyond its bound and every actor once closed, and its
// gauge follows what waits.
func TestIdleConnsBounds(t *testing.T) {
	var gauge atomic.Int64
	s := newIdleActors[connActor](2, &gauge)
	w := func(n string) idleActor[connActor] {
		return idleActor[connActor]{pid: actor.NewPID("x", "conn/"+n), a: &connActor{}}
	}
	a, b, c := w("1"), w("2"), w("3")
	if _, ok := s.pop(); ok {
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
	if got, ok := s.pop(); !ok || got != b {
		t.Fatalf("pop returned %v, want the most recent (%v)", got.pid, b.pid)
	}
	if gauge.Load() != 1 {
		t.Fatalf("gauge %d after a pop, want 1", gauge.Load())
	}
	s.close()
	if _, ok := s.pop(); gauge.Load() != 0 || ok {
		t.Fatalf("after close: gauge %d, an actor still handed out", gauge.Load())
	}
	if s.push(c) {
		t.Fatal("push after close accepted: the proxy actor is stopping")
	}
}

// TestHandedConnEndedByStopping: a connection handed to a conn actor that
// stops before it reads its serveConn (protoactor drops the user messages
// of a stopping actor) is closed and no longer counted open.
func TestHandedConnEndedByStopping(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	b := &Boundary{cfg: &Config{}, stats: &Stats{}, live: newConnSet()}
	client, server := net.Pipe()
	defer client.Close()
	b.live.add(server)
	c := &connActor{b: b, idle: newIdleActors[connActor](1, &b.stats.IdleConns)}
	c.job.Store(&serveConn{conn: server, id: 1})
	pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return c }))
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if n := b.live.len(); n != 0 {
		t.Fatalf("%d connections still counted open after their actor stopped", n)
	}
	_ = client.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the client's read after its actor stopped: %v, want EOF (closed)", err)
	}
}
