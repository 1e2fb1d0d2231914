package transport_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
)

// Local users of the admission tests (none needs to exist: a socket's
// owner is any uid the creating thread's fsuid names).
const (
	nobodyUID = 65534
	otherUID  = 65533
)

// admitServer is a listener whose accept loop asks an Admission, as an
// endpoint's does, and holds each admitted connection as a handshake
// that never ends would (until the peer closes it, or the handshake
// timeout passes).
type admitServer struct {
	adm  *transport.Admission
	ln   net.Listener
	log  *testenv.Buffer
	addr string
	// held counts the admitted connections not yet ended.
	held atomic.Int64
}

func newAdmitServer(t *testing.T, l transport.Limits) *admitServer {
	t.Helper()
	log := &testenv.Buffer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &admitServer{adm: transport.NewAdmission(l, nil, zerolog.New(log)), ln: ln, log: log, addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			done, ok := s.adm.Admit(c)
			if !ok {
				continue
			}
			s.held.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(time.Now().Add(s.adm.HandshakeTimeout()))
				_, err := io.Copy(io.Discard, c)
				if err != nil {
					s.adm.HandshakeFailed(c, err)
				}
				s.held.Add(-1)
				done()
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = s.adm.Close()
		wg.Wait()
		if t.Failed() {
			t.Logf("log:\n%s", log)
		}
	})
	return s
}

// dialAs connects to addr as local user uid (transporttest.DialAs);
// closed at cleanup.
func dialAs(t *testing.T, uid int, addr string) net.Conn {
	t.Helper()
	c, err := transporttest.DialAs(uid, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialAs connects to s as uid; closed at cleanup.
func (s *admitServer) dialAs(t *testing.T, uid int) net.Conn {
	t.Helper()
	return dialAs(t, uid, s.addr)
}

// closedAtOnce reports whether the server closed c within wait (a read
// ends); false when c is still open then.
func closedAtOnce(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// wantHeld waits until the server holds n connections.
func (s *admitServer) wantHeld(t *testing.T, n int64) {
	t.Helper()
	eventually(t, func() bool { return s.held.Load() == n }, "the server holds %d connections, want %d", s.held.Load(), n)
}

// TestAdmitPerSource: one local user holds as many connections in their
// handshake as the per-source cap allows; the next is closed at once,
// counted and logged with its source (the owner's uid, though every user
// connects from 127.0.0.1). Another user, and root, still get in; once
// the first user's connections end, it gets in again.
func TestAdmitPerSource(t *testing.T) {
	testenv.NeedRoot(t) // to make sockets of other users
	s := newAdmitServer(t, transport.Limits{PendingPerSource: 4, PendingTotal: 100, HandshakeTimeout: time.Minute})
	var mine []net.Conn
	for range 4 {
		mine = append(mine, s.dialAs(t, nobodyUID))
	}
	s.wantHeld(t, 4)
	over := s.dialAs(t, nobodyUID)
	if !closedAtOnce(over, 2*time.Second) {
		t.Fatal("the 5th connection of uid 65534 is held: the per-source cap is not enforced")
	}
	if n := s.adm.Refusals().Get(transport.ReasonPendingSource); n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonPendingSource, n)
	}
	eventually(t, func() bool {
		return strings.Contains(s.log.String(), `"reason":"pending_source"`) && strings.Contains(s.log.String(), `"source":"uid:65534"`)
	}, "the refusal is not logged with its reason and source:\n%s", s.log)
	other := s.dialAs(t, otherUID)
	for range 6 { // root: over the per-source cap, counted in the total
		s.dialAs(t, 0)
	}
	s.wantHeld(t, 4+1+6)
	if closedAtOnce(other, 200*time.Millisecond) {
		t.Fatal("uid 65533's connection was closed: one user's cap is not another's")
	}
	if total, busiest := s.adm.Pending(); total != 11 || busiest != 6 {
		t.Fatalf("Pending() = %d, %d; want 11 in all, 6 of root", total, busiest)
	}
	// uid 65534's connections end: it may start a handshake again.
	for _, c := range mine {
		_ = c.Close()
	}
	s.wantHeld(t, 1+6)
	again := s.dialAs(t, nobodyUID)
	s.wantHeld(t, 1+6+1)
	if closedAtOnce(again, 200*time.Millisecond) {
		t.Fatal("uid 65534 is refused after its connections ended")
	}
	if n := s.adm.Refusals().Total(); n != 1 {
		t.Fatalf("%d refusals, want the one", n)
	}
}

// TestAdmitTotal: with the total cap reached by two users, a third user's
// connection is closed at once and counted. Root's is not: root is not
// capped per source, counts in the total, and is not refused by it (many
// users filling the total cannot lock the local admin out).
func TestAdmitTotal(t *testing.T) {
	testenv.NeedRoot(t)
	s := newAdmitServer(t, transport.Limits{PendingPerSource: 4, PendingTotal: 6, HandshakeTimeout: time.Minute})
	for range 4 {
		s.dialAs(t, nobodyUID)
	}
	held := []net.Conn{s.dialAs(t, otherUID), s.dialAs(t, otherUID)}
	s.wantHeld(t, 6)
	if c := s.dialAs(t, 65532); !closedAtOnce(c, 2*time.Second) {
		t.Fatal("uid 65532's connection is held over the total cap")
	}
	if n := s.adm.Refusals().Get(transport.ReasonPendingTotal); n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonPendingTotal, n)
	}
	var roots []net.Conn
	for range 3 {
		roots = append(roots, s.dialAs(t, 0))
	}
	s.wantHeld(t, 9)
	for i, c := range roots {
		if closedAtOnce(c, 100*time.Millisecond) {
			t.Fatalf("root's connection %d was refused while other users fill the total cap", i)
		}
	}
	if n := s.adm.Refusals().Total(); n != 1 {
		t.Fatalf("%d refusals, want the one of uid 65532", n)
	}
	// Root's connections count in the total: with them gone and one of
	// 65533's, another user fits again.
	for _, c := range append(roots, held[0]) {
		_ = c.Close()
	}
	s.wantHeld(t, 5)
	s.dialAs(t, 65532)
	s.wantHeld(t, 6)
}

// TestAdmitHandshakeTimeout: a connection that sends nothing is closed
// when the handshake timeout passes, and counted.
func TestAdmitHandshakeTimeout(t *testing.T) {
	s := newAdmitServer(t, transport.Limits{HandshakeTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if !closedAtOnce(c, 5*time.Second) {
		t.Fatal("a silent connection is held past the handshake timeout")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed after %s, before the timeout", d)
	}
	eventually(t, func() bool { return s.adm.Refusals().Get(transport.ReasonHandshakeTimeout) == 1 }, "the timeout is not counted")
}

// TestAdmitDescriptorReserve: a connection accepted within the reserve of
// the descriptor limit (every descriptor below the one it was given is in
// use) is closed at once and counted, uid 65534's anywhere in it; root's
// (this process's user's) gets into the reserve's lower half, never its
// upper half. When descriptors are free again, connections get in.
func TestAdmitDescriptorReserve(t *testing.T) {
	testenv.NeedRoot(t) // to make a socket of another user
	low := lowestFreeFD(t)
	// The limit sits 200 above the lowest free descriptor, the reserve is
	// its top 100 (root may use the lower 50): with the descriptors below
	// a line taken, a connection (its client end, then the accepted end)
	// lands just above it.
	s := newAdmitServer(t, transport.Limits{DescriptorLimit: low + 200, DescriptorReserve: 100, HandshakeTimeout: time.Minute})
	var fill []*os.File
	t.Cleanup(func() {
		for _, f := range fill {
			_ = f.Close()
		}
	})
	fillTo := func(line int) {
		t.Helper()
		for lowestFreeFD(t) < line {
			f, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			fill = append(fill, f)
		}
	}
	fillTo(low + 100)
	if c := s.dialAs(t, nobodyUID); !closedAtOnce(c, 2*time.Second) {
		t.Fatalf("uid 65534's connection accepted within the reserve (descriptors below %d in use, limit %d) is held", low+100, low+200)
	}
	if n := s.adm.Refusals().Get(transport.ReasonDescriptors); n != 1 {
		t.Fatalf("%s counted %d, want 1", transport.ReasonDescriptors, n)
	}
	root := s.dialAs(t, 0)
	s.wantHeld(t, 1)
	if closedAtOnce(root, 200*time.Millisecond) {
		t.Fatal("root's connection in the reserve's lower half was refused")
	}
	fillTo(low + 150)
	if c := s.dialAs(t, 0); !closedAtOnce(c, 2*time.Second) {
		t.Fatalf("root's connection in the reserve's upper half (descriptors below %d in use) is held", low+150)
	}
	if n := s.adm.Refusals().Get(transport.ReasonDescriptors); n != 2 {
		t.Fatalf("%s counted %d, want 2", transport.ReasonDescriptors, n)
	}
	for _, f := range fill {
		_ = f.Close()
	}
	fill = nil
	ok := s.dialAs(t, nobodyUID)
	s.wantHeld(t, 2)
	if closedAtOnce(ok, 200*time.Millisecond) {
		t.Fatal("refused with descriptors free again")
	}
}

// lowestFreeFD is the descriptor the next open would get.
func lowestFreeFD(t *testing.T) int {
	t.Helper()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return int(f.Fd())
}

// TestAdmitFloodKeepsRoom: uid 65534 opens connections as fast as it can
// (8 goroutines, each reconnecting as soon as the server closes it) for a
// second and a half: the server never holds more than the per-source cap
// of them, and root's connections still get in all along.
func TestAdmitFloodKeepsRoom(t *testing.T) {
	testenv.NeedRoot(t)
	s := newAdmitServer(t, transport.Limits{PendingPerSource: 8, PendingTotal: 32, HandshakeTimeout: time.Minute})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []net.Conn
			defer func() {
				for _, c := range mine {
					_ = c.Close()
				}
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := transporttest.DialAs(nobodyUID, s.addr)
				if err != nil {
					continue
				}
				opened.Add(1)
				if !closedAtOnce(c, 20*time.Millisecond) {
					mine = append(mine, c) // held by the server: keep it
					continue
				}
				_ = c.Close()
			}
		}()
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	legit := 0
	for time.Now().Before(deadline) {
		if _, busiest := s.adm.Pending(); busiest > 8 {
			t.Fatalf("the server holds %d connections of one source (cap 8)", busiest)
		}
		c := s.dialAs(t, 0)
		if closedAtOnce(c, 50*time.Millisecond) {
			t.Fatal("root's connection was refused during the flood")
		}
		_ = c.Close()
		legit++
	}
	close(stop)
	wg.Wait()
	refused := s.adm.Refusals().Get(transport.ReasonPendingSource)
	if refused < 100 {
		t.Fatalf("only %d refusals of %d connections: the flood did not press", refused, opened.Load())
	}
	t.Logf("flood: %d connections opened by uid 65534, %d refused at once; %d of root's admitted meanwhile", opened.Load(), refused, legit)
}

// TestAdmitRefusalLogBound: of 40 refusals the log keeps the first
// LogRefusals lines of the window, and one line that says how many more
// were refused (each is counted).
func TestAdmitRefusalLogBound(t *testing.T) {
	testenv.NeedRoot(t)
	s := newAdmitServer(t, transport.Limits{PendingPerSource: 1, PendingTotal: 100, LogRefusals: 3, LogWindow: time.Hour, HandshakeTimeout: time.Minute})
	s.dialAs(t, nobodyUID)
	s.wantHeld(t, 1)
	for range 40 {
		if c := s.dialAs(t, nobodyUID); !closedAtOnce(c, 2*time.Second) {
			t.Fatal("held over the cap")
		}
	}
	if n := s.adm.Refusals().Get(transport.ReasonPendingSource); n != 40 {
		t.Fatalf("counted %d refusals, want 40", n)
	}
	eventually(t, func() bool { return strings.Count(s.log.String(), `"remote refused"`) == 3 },
		"%d refusal lines, want 3 (the bound):\n%s", strings.Count(s.log.String(), `"remote refused"`), s.log)
	s.adm.FlushLog()
	if !strings.Contains(s.log.String(), `"refusalsNotLogged":37`) {
		t.Fatalf("no line says 37 refusals were left out:\n%s", s.log)
	}
	t.Logf("log after 40 refusals (%d bytes):\n%s", len(s.log.String()), s.log)
}

// BenchmarkAdmit is what Admit adds to each accepted connection: the
// descriptor check, the caps and the sock_diag lookup of the peer
// socket's owner (here a connection of this process: found).
func BenchmarkAdmit(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	adm := transport.NewAdmission(transport.Limits{}, nil, zerolog.Nop())
	defer adm.Close()
	for b.Loop() {
		done, ok := adm.Admit(s)
		if !ok {
			b.Fatal("refused")
		}
		done()
	}
}
