package boundary_test

import (
	"context"
	"io"
	"net/netip"
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

// TestConnectionEndTold: when a tunnel ends, the conn actor tells the
// resolver which socket's connection ended (its client's fd is then read
// first for the next socket).
func TestConnectionEndTold(t *testing.T) {
	rec := &endRecorder{}
	e := startEnv(t, envOpts{wrap: func(r identity.Resolver) identity.Resolver { rec.Resolver = r; return rec }})
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
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
