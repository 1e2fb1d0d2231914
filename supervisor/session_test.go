package supervisor

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/transport"
)

// TestSessionCommands: the session actor takes a FaultRequest only when
// the gateway runs --chaos, and commands only from a gateway node (a
// remote caller of another role is refused, nothing armed).
func TestSessionCommands(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chaos  bool
		peer   string // the transport's stamp; "" for a local sender
		status messages.Status
	}{
		{"no chaos", false, "gateway:local", messages.Status_STATUS_INVALID},
		{"chaos, from the gateway", true, "gateway:local", messages.Status_STATUS_OK},
		{"chaos, from a client", true, "client:eve", messages.Status_STATUS_UNAUTHENTICATED},
		{"chaos, from another supervisor", true, "supervisor:b", messages.Status_STATUS_UNAUTHENTICATED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := actor.NewActorSystem()
			defer sys.Shutdown()
			faults := fault.NewSet()
			s := &session{log: zerolog.Nop(), gateways: []string{"nowhere:1"}, chaos: tc.chaos, faults: faults,
				hello: &messages.Hello{Sandbox: "a"}, restarts: func() map[string]int64 { return nil }}
			pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sys.Root.StopFuture(pid).Wait() }() // no more Hellos
			var headers map[string]string
			if tc.peer != "" {
				headers = map[string]string{transport.PeerHeader: tc.peer}
			}
			// As the transport delivers a remote message: an envelope with
			// the peer's identity in its header.
			f := actor.NewFuture(sys, 5*time.Second)
			sys.Root.Send(pid, &actor.MessageEnvelope{Header: headers, Message: &messages.FaultRequest{Name: "a", Rule: "identity.lookup=error:1"}, Sender: f.PID()})
			res, err := f.Result()
			if err != nil {
				t.Fatal(err)
			}
			r, ok := res.(*messages.Reply)
			if !ok || r.Status != tc.status {
				t.Fatalf("reply %v, want status %s", res, tc.status)
			}
			armed := faults.Inject(fault.IdentityLookup) != nil
			if armed != (tc.status == messages.Status_STATUS_OK) {
				t.Fatalf("fault armed: %v after reply %s", armed, r.Status)
			}
		})
	}
}

// TestSessionCommandsForAnotherSandbox: a command that names another
// sandbox or instance is refused (the gateway sends to the session address
// a Hello named; a wrong one must not change this supervisor).
func TestSessionCommandsForAnotherSandbox(t *testing.T) {
	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	faults := fault.NewSet()
	s := &session{log: zerolog.Nop(), gateways: []string{"nowhere:1"}, chaos: true, faults: faults,
		hello: &messages.Hello{Sandbox: "a", Instance: "i1"}, restarts: func() map[string]int64 { return nil }}
	pid, err := sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sys.Root.StopFuture(pid).Wait() }() // no more Hellos
	gw := map[string]string{transport.PeerHeader: "gateway:local"}
	for _, msg := range []any{
		&messages.FaultRequest{Name: "b", Rule: "identity.lookup=error:1"},
		&messages.SetPolicy{Sandbox: "b", Instance: "i1", Policy: []byte("version: 1\n"), Version: 9},
		&messages.SetPolicy{Sandbox: "a", Instance: "i0", Policy: []byte("version: 1\n"), Version: 9},
	} {
		f := actor.NewFuture(sys, 5*time.Second)
		sys.Root.Send(pid, &actor.MessageEnvelope{Header: gw, Message: msg, Sender: f.PID()})
		res, err := f.Result()
		if r, ok := res.(*messages.Reply); err != nil || !ok || r.Status != messages.Status_STATUS_INVALID {
			t.Fatalf("%T %v: reply %v %v, want INVALID", msg, msg, res, err)
		}
	}
	if faults.Inject(fault.IdentityLookup) != nil {
		t.Fatal("a fault for sandbox b was armed in a's supervisor")
	}
}

// fakeCluster stands for gateway nodes in one actor system without a
// transport: a PID at a node's address is routed to a local actor, as the
// transport routes remote PIDs; a PID at an address with no route goes to
// dead letters (a node with nothing listening: the request fails at once).
type fakeCluster struct {
	sys *actor.ActorSystem
	log testenv.Buffer // the session's log, shown when a test fails

	mu     sync.Mutex
	routes map[string]*actor.PID // "address/id" -> local actor
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	c := &fakeCluster{routes: map[string]*actor.PID{}}
	c.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	c.sys.ProcessRegistry.RegisterAddressResolver(func(pid *actor.PID) (actor.Process, bool) {
		c.mu.Lock()
		local, ok := c.routes[pid.Address+"/"+pid.Id]
		c.mu.Unlock()
		if !ok {
			return nil, false
		}
		return c.sys.ProcessRegistry.Get(local)
	})
	t.Cleanup(func() {
		c.sys.Shutdown()
		if t.Failed() {
			t.Logf("session log:\n%s", c.log.String())
		}
	})
	return c
}

// serve spawns a at the node address addr under id and returns the PID
// the node would hand out for it.
func (c *fakeCluster) serve(t *testing.T, addr, id string, a actor.Actor) *actor.PID {
	t.Helper()
	local, err := c.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return a }), addr+"/"+id)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.routes[addr+"/"+id] = local
	c.mu.Unlock()
	return actor.NewPID(addr, id)
}

// node starts a node's hello actor at addr; answer gives its answer to
// the n-th Hello it receives (from 0), nil for none.
func (c *fakeCluster) node(t *testing.T, addr string, answer func(n int) *messages.HelloAck) *fakeHello {
	t.Helper()
	h := &fakeHello{answer: answer}
	c.serve(t, addr, transport.HelloActor, h)
	return h
}

// sessionActor starts a gateway session actor at node addr; alive: it
// acknowledges heartbeats (else it never answers).
func (c *fakeCluster) sessionActor(t *testing.T, addr string, alive bool) (*actor.PID, *fakeSession) {
	t.Helper()
	s := &fakeSession{}
	s.alive.Store(alive)
	return c.serve(t, addr, transport.GatewaySessionPrefix("a")+"1", s), s
}

// start runs a session that says Hello to gateways, ticked as run() does.
func (c *fakeCluster) start(t *testing.T, gateways ...string) {
	t.Helper()
	s := &session{log: zerolog.New(&c.log).With().Timestamp().Logger(), gateways: gateways, faults: fault.NewSet(),
		hello: &messages.Hello{Sandbox: "a", Instance: "i1"}, restarts: func() map[string]int64 { return nil },
		refused: func(why string) { c.log.Write([]byte("REFUSED: " + why + "\n")) }, exitDone: func() {}}
	pid, err := c.sys.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), transport.SupervisorSession)
	if err != nil {
		t.Fatal(err)
	}
	cancel := scheduler.NewTimerScheduler(c.sys.Root).SendRepeatedly(heartbeatEvery, heartbeatEvery, pid, &tick{})
	t.Cleanup(func() {
		cancel()
		_ = c.sys.Root.StopFuture(pid).Wait()
	})
}

// fakeHello is a gateway node's hello actor: it records when each Hello
// came and answers as told.
type fakeHello struct {
	answer func(n int) *messages.HelloAck

	mu sync.Mutex
	at []time.Time
}

func (h *fakeHello) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.Hello); !ok {
		return
	}
	h.mu.Lock()
	n := len(h.at)
	h.at = append(h.at, time.Now())
	h.mu.Unlock()
	if h.answer != nil {
		if ack := h.answer(n); ack != nil {
			ctx.Respond(ack)
		}
	}
}

// hellos returns when each Hello came.
func (h *fakeHello) hellos() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.at...)
}

// fakeSession is a gateway's session actor: it counts heartbeats and
// acknowledges them while alive.
type fakeSession struct {
	alive atomic.Bool
	beats atomic.Int64
}

func (s *fakeSession) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.Heartbeat); !ok {
		return
	}
	s.beats.Add(1)
	if s.alive.Load() {
		ctx.Respond(&messages.HeartbeatAck{})
	}
}

func ok(session *actor.PID, gateways ...string) *messages.HelloAck {
	return &messages.HelloAck{Status: messages.Status_STATUS_OK, Session: session, Gateways: gateways}
}

// sessionWait bounds every wait for a session to come up or be lost.
const sessionWait = 15 * time.Second

// TestSessionHelloSkipsDeadGateways: of the listed gateway nodes, one has
// nothing listening and one never answers; the session passes on to the
// next at once (one Hello timeout for the silent node, no backoff) and
// heartbeats the session actor the answer names, which lives on a third
// node (the owner answers a Hello forwarded by the node it went to).
func TestSessionHelloSkipsDeadGateways(t *testing.T) {
	c := newFakeCluster(t)
	owner, sess := c.sessionActor(t, "gw-c:1", true)
	silent := c.node(t, "gw-a:1", nil)
	live := c.node(t, "gw-b:1", func(int) *messages.HelloAck { return ok(owner) })
	start := time.Now()
	c.start(t, "gw-gone:1", "gw-a:1", "gw-b:1")
	testenv.Eventually(t, sessionWait, func() bool { return sess.beats.Load() >= 2 }, "no heartbeats at the owner's session actor")
	got := live.hellos()
	if len(got) != 1 {
		t.Fatalf("gw-b got %d Hellos, want 1", len(got))
	}
	if n := len(silent.hellos()); n != 1 {
		t.Fatalf("the silent gw-a got %d Hellos, want 1 (then the next node)", n)
	}
	if took := got[0].Sub(start); took > helloTimeout+time.Second {
		t.Fatalf("gw-b was asked %s after the start, want one Hello timeout (%s) and no backoff", took, helloTimeout)
	}
}

// TestSessionHelloBacksOffPerRound: when no listed node answers, the
// nodes are asked in turn, and the session waits (a growing backoff) only
// after each whole round: no tight loop, no node skipped.
func TestSessionHelloBacksOffPerRound(t *testing.T) {
	c := newFakeCluster(t)
	// Each answers with a Reply, not a HelloAck: no answer, at once.
	a, b := &fakeHello{}, &fakeHello{}
	c.serve(t, "gw-a:1", transport.HelloActor, &replier{hello: a})
	c.serve(t, "gw-b:1", transport.HelloActor, &replier{hello: b})
	c.start(t, "gw-a:1", "gw-b:1")
	// Rounds at about 0, 0.2, 0.6 and 1.4 s (backoff 200 ms doubling).
	testenv.Eventually(t, sessionWait, func() bool { return len(b.hellos()) >= 4 }, "gw-b got fewer than 4 Hellos")
	ha, hb := a.hellos(), b.hellos()
	if len(ha) < len(hb) || len(ha) > len(hb)+1 {
		t.Fatalf("Hellos: %d to gw-a, %d to gw-b; want them in turn", len(ha), len(hb))
	}
	for i := 1; i < 4; i++ {
		wait := ha[i].Sub(hb[i-1]) // the wait at the end of round i
		want := minBackoff << (i - 1)
		if wait < want || wait > want+700*time.Millisecond {
			t.Errorf("round %d: waited %s after a round without an answer, want %s", i, wait, want)
		}
		if d := hb[i].Sub(ha[i]); d > 300*time.Millisecond {
			t.Errorf("round %d: gw-b asked %s after gw-a failed, want at once", i, d)
		}
	}
}

// replier is a hello actor that answers a Hello with a Reply (not a
// HelloAck), recording it in hello.
type replier struct{ hello *fakeHello }

func (r *replier) Receive(ctx actor.Context) {
	r.hello.Receive(ctx)
	if _, ok := ctx.Message().(*messages.Hello); ok {
		ctx.Respond(&messages.Reply{Status: messages.Status_STATUS_OK})
	}
}

// TestSessionHelloUnavailable: a node that answers UNAVAILABLE (no owner
// for the sandbox yet: a failover) is asked again after unavailableRetry,
// not after the growing backoff or the next tick, and not passed over
// for the next node; its later OK brings the session up.
func TestSessionHelloUnavailable(t *testing.T) {
	c := newFakeCluster(t)
	owner, sess := c.sessionActor(t, "gw-a:1", true)
	const unavailable = 3
	a := c.node(t, "gw-a:1", func(n int) *messages.HelloAck {
		if n < unavailable {
			return &messages.HelloAck{Status: messages.Status_STATUS_UNAVAILABLE, Message: "no owner yet"}
		}
		return ok(owner)
	})
	other, _ := c.sessionActor(t, "gw-b:1", true)
	b := c.node(t, "gw-b:1", func(int) *messages.HelloAck { return ok(other) })
	c.start(t, "gw-a:1", "gw-b:1")
	testenv.Eventually(t, sessionWait, func() bool { return sess.beats.Load() >= 1 }, "no heartbeats at gw-a's session actor")
	got := a.hellos()
	if len(got) != unavailable+1 {
		t.Fatalf("gw-a got %d Hellos, want %d", len(got), unavailable+1)
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].Sub(got[i-1]); gap < unavailableRetry || gap > unavailableRetry+350*time.Millisecond {
			t.Errorf("Hello %d came %s after the UNAVAILABLE answer, want %s", i, gap, unavailableRetry)
		}
	}
	if n := len(b.hellos()); n != 0 {
		t.Fatalf("gw-b got %d Hellos; an UNAVAILABLE answer must not pass the turn", n)
	}
}

// TestSessionHelloAckGateways: an accepted Hello's list of gateways
// replaces the session's; when the session is lost, the next Hello goes to
// the node that answered if the new list has it, else to its first node.
func TestSessionHelloAckGateways(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster []string // HelloAck.gateways from gw-a
		next    string   // where the Hello after the loss goes
	}{
		{"answering node not listed", []string{"gw-c:1", "gw-d:1"}, "gw-c:1"},
		{"answering node listed", []string{"gw-c:1", "gw-a:1"}, "gw-a:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newFakeCluster(t)
			// gw-a's first session never acknowledges a heartbeat: it is
			// lost, and a second Hello follows.
			dead, _ := c.sessionActor(t, "gw-z:1", false)
			nodes := map[string]*fakeHello{}
			sessions := map[string]*fakeSession{}
			for _, addr := range []string{"gw-a:1", "gw-c:1", "gw-d:1"} {
				owner, sess := c.sessionActor(t, addr, true)
				sessions[addr] = sess
				nodes[addr] = c.node(t, addr, func(n int) *messages.HelloAck {
					if addr == "gw-a:1" && n == 0 {
						return ok(dead, tc.cluster...)
					}
					return ok(owner)
				})
			}
			c.start(t, "gw-a:1")
			testenv.Eventually(t, sessionWait, func() bool { return sessions[tc.next].beats.Load() >= 1 },
				"no session with %s after the first was lost", tc.next)
			want := map[string]int{"gw-a:1": 1, "gw-c:1": 0, "gw-d:1": 0}
			want[tc.next]++
			for addr, h := range nodes {
				if n := len(h.hellos()); n != want[addr] {
					t.Errorf("%s got %d Hellos, want %d", addr, n, want[addr])
				}
			}
		})
	}
}

// TestSessionGoneSaysHelloAtOnce: a heartbeat answered by a dead letter
// (the gateway has no such session actor: replaced by a crossed Hello, or
// ended) makes the session say Hello again at once, not after lostAfter.
func TestSessionGoneSaysHelloAtOnce(t *testing.T) {
	c := newFakeCluster(t)
	owner, sess := c.sessionActor(t, "gw-b:1", true)
	node := c.node(t, "gw-b:1", func(int) *messages.HelloAck { return ok(owner) })
	c.start(t, "gw-b:1")
	testenv.Eventually(t, sessionWait, func() bool { return sess.beats.Load() >= 1 }, "heartbeats at the session actor")
	c.mu.Lock()
	local := c.routes["gw-b:1/"+owner.Id]
	c.mu.Unlock()
	if err := c.sys.Root.StopFuture(local).Wait(); err != nil { // the session actor is gone
		t.Fatal(err)
	}
	gone := time.Now()
	testenv.Eventually(t, sessionWait, func() bool { return len(node.hellos()) >= 2 }, "a second Hello")
	// The next heartbeat (within a period) finds it gone; waiting for
	// lostAfter without acks would take at least two periods more.
	if took := node.hellos()[1].Sub(gone); took >= heartbeatEvery*3/2 {
		t.Fatalf("second Hello %s after the session went: want it at the next heartbeat (< %s), not after lostAfter", took, heartbeatEvery*3/2)
	} else {
		t.Logf("second Hello %s after the session actor went", took.Round(time.Millisecond))
	}
}

// zombieSession is the session actor of a node that died: it holds each
// heartbeat until released, then answers it with a dead letter, as the
// transport does for a message to an address whose process is gone.
type zombieSession struct {
	beats   atomic.Int64
	release chan struct{}
}

func (z *zombieSession) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.Heartbeat); !ok {
		return
	}
	z.beats.Add(1)
	to, self, root := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root
	go func() {
		<-z.release
		root.Send(to, &actor.DeadLetterResponse{Target: self})
	}()
}

// TestSessionStaleHeartbeatAfterReconnect: a node takes the sandbox over
// (Reconnect) while a heartbeat to the old owner's session is in flight;
// that heartbeat's late dead letter says nothing of the new session, so
// the supervisor keeps it (a second Hello would replace the new owner's
// session and cut the execs on it).
func TestSessionStaleHeartbeatAfterReconnect(t *testing.T) {
	c := newFakeCluster(t)
	z := &zombieSession{release: make(chan struct{})}
	old := c.serve(t, "gw-a:1", transport.GatewaySessionPrefix("a")+"1", z)
	c.node(t, "gw-a:1", func(int) *messages.HelloAck { return ok(old) })
	owner, sess := c.sessionActor(t, "gw-b:1", true)
	nodeB := c.node(t, "gw-b:1", func(int) *messages.HelloAck { return ok(owner) })
	c.start(t, "gw-a:1", "gw-b:1")
	testenv.Eventually(t, sessionWait, func() bool { return z.beats.Load() >= 1 }, "a heartbeat held by the old owner")
	c.sys.Root.Send(c.sys.NewLocalPID(transport.SupervisorSession), &messages.Reconnect{Gateway: "gw-b:1"})
	testenv.Eventually(t, sessionWait, func() bool { return sess.beats.Load() >= 1 }, "heartbeats at the new owner's session")
	close(z.release) // the old heartbeat's dead letter comes back now
	beats := sess.beats.Load()
	testenv.Eventually(t, sessionWait, func() bool { return sess.beats.Load() >= beats+2 }, "two more heartbeats at the new session")
	if n := len(nodeB.hellos()); n != 1 {
		t.Fatalf("the new owner got %d Hellos, want 1: the old session's dead letter replaced the new session", n)
	}
}
