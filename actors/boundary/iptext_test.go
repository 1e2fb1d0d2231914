package boundary

import (
	"net/netip"
	"testing"
)

// TestIPString: the text of each address is its String(), whatever came
// before, and naming the same address again allocates nothing.
func TestIPString(t *testing.T) {
	b := &Boundary{}
	addrs := []string{"127.0.0.1", "127.0.0.1", "10.0.2.15", "::1", "::ffff:127.0.0.1", "fe80::1%eth0", "127.0.0.1"}
	for _, s := range addrs {
		a := netip.MustParseAddr(s)
		if got := b.ipString(a); got != a.String() {
			t.Fatalf("ipString(%s) = %q, want %q", s, got, a.String())
		}
	}
	a := netip.MustParseAddr("10.0.2.15")
	b.ipString(a)
	if n := testing.AllocsPerRun(100, func() { _ = b.ipString(a) }); n != 0 {
		t.Fatalf("ipString of the last address: %v allocations, want 0", n)
	}
}
