package boundary_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/boundary/identity"
)

// endRecorder is a resolver that records what it resolved and what it was
// told has ended.
type endRecorder struct {
	identity.Resolver
	mu              sync.Mutex
	resolved, ended []uint32
}

func (r *endRecorder) Resolve(ctx context.Context, local, remote netip.AddrPort) (identity.Identity, error) {
	id, err := r.Resolver.Resolve(ctx, local, remote)
	r.mu.Lock()
	r.resolved = append(r.resolved, id.Socket)
	r.mu.Unlock()
	return id, err
}

func (r *endRecorder) Ended(id identity.Identity) {
	r.mu.Lock()
	r.ended = append(r.ended, id.Socket)
	r.mu.Unlock()
	r.Resolver.(identity.Ender).Ended(id)
}

// tunnelRecorded opens a tunnel to host:port through a boundary whose
// resolver is wrapped in an endRecorder.
func tunnelRecorded(t *testing.T, host string, port func(*env) int) (*endRecorder, *env, net.Conn) {
	t.Helper()
	rec := &endRecorder{}
	e := startEnv(t, envOpts{wrap: func(r identity.Resolver) identity.Resolver { rec.Resolver = r; return rec }})
	code, body, c := e.connect(t, host, port(e))
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
	return rec, e, c
}

// TestConnectionEndTold: when a tunnel ends, the conn actor tells the
// resolver which socket's connection ended (its client's fd is then read
// first for the next socket).
func TestConnectionEndTold(t *testing.T) {
	rec, _, c := tunnelRecorded(t, "up.test", func(e *env) int { return e.echoPort })
	buf := []byte("ping")
	_, _ = c.Write(buf)
	_, _ = io.ReadFull(c, buf)
	_ = c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		resolved, ended := slices.Clone(rec.resolved), slices.Clone(rec.ended)
		rec.mu.Unlock()
		if len(resolved) == 1 && resolved[0] != 0 && slices.Equal(ended, resolved) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("resolved sockets %v, ended %v: want the one resolved told ended", resolved, ended)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndToldAtClientEOF: the resolver is told a connection ended as soon
// as its client has sent its last byte, while the upstream still holds the
// tunnel open (the client has most often closed its socket by then, and
// its next connection may arrive before the tunnel winds down); and once
// only, not again when the tunnel ends.
func TestEndToldAtClientEOF(t *testing.T) {
	rec, e, c := tunnelRecorded(t, "hold.test", func(e *env) int { return e.holdPort })
	ended := func() ([]uint32, []uint32) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Clone(rec.resolved), slices.Clone(rec.ended)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resolved, got := ended()
		if len(resolved) == 1 && resolved[0] != 0 && slices.Equal(got, resolved) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the client's half-close: resolved %v, ended %v; want the one resolved told ended", resolved, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The tunnel is still open: the upstream holds it.
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the held tunnel: %d bytes, %v; want a timeout (the tunnel open)", n, err)
	}
	// The upstream lets go: the tunnel ends, and its end is not told again.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	e.release()
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after the upstream closed: %d bytes, %v; want EOF", n, err)
	}
	_ = c.Close()
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		if resolved, got := ended(); !slices.Equal(got, resolved) {
			t.Fatalf("after the tunnel ended: resolved %v, ended %v; want it told once", resolved, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
