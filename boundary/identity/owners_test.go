package identity

import (
	"errors"
	"net/netip"
	"os"
	"testing"
)

// openOwners opens SocketOwners, closed at cleanup.
func openOwners(tb testing.TB) *SocketOwners {
	tb.Helper()
	o, err := OpenSocketOwners()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = o.Close() })
	return o
}

// TestSocketOwner: the owner of an accepted connection's peer socket is
// this process's uid; a peer that is no socket here is ErrSocketNotFound.
func TestSocketOwner(t *testing.T) {
	o := openOwners(t)
	local, peer := ends(pair(t, listen(t, "tcp4", "127.0.0.1:0")))
	uid, err := o.Owner(peer, local)
	if err != nil || uid != uint32(os.Geteuid()) {
		t.Fatalf("Owner = %d, %v; want %d", uid, err, os.Geteuid())
	}
	gone := netip.AddrPortFrom(peer.Addr(), 1)
	if _, err := o.Owner(gone, local); !errors.Is(err, ErrSocketNotFound) {
		t.Fatalf("Owner of no socket: %v, want ErrSocketNotFound", err)
	}
}

// BenchmarkSocketOwner is the cost a listener pays per accepted
// connection to tell local users apart: one exact sock_diag lookup.
func BenchmarkSocketOwner(b *testing.B) {
	o := openOwners(b)
	local, peer := ends(pair(b, listen(b, "tcp4", "127.0.0.1:0")))
	b.Run("local_peer", func(b *testing.B) {
		for b.Loop() {
			if _, err := o.Owner(peer, local); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no_such_socket", func(b *testing.B) { // a peer on another host
		gone := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), 1)
		for b.Loop() {
			if _, err := o.Owner(gone, local); !errors.Is(err, ErrSocketNotFound) {
				b.Fatal(err)
			}
		}
	})
}
