package proxy

import (
	"net/netip"
	"strings"
	"testing"
)

// TestLoopbackFix: the refusal of a loopback upstream names the flag of
// whoever runs the boundary.
func TestLoopbackFix(t *testing.T) {
	a := netip.MustParseAddr("127.0.0.1")
	if _, why := CheckAddr(a, DestRule{}); !strings.Contains(why, "start the boundary with --allow-loopback-upstream") {
		t.Errorf("standalone: %q", why)
	}
	fix := "start the gateway with `stockade gateway run --allow-loopback-upstream` to allow it"
	if _, why := CheckAddr(a, DestRule{LoopbackFix: fix}); why != "127.0.0.1 is loopback ("+fix+")" {
		t.Errorf("in a sandbox: %q", why)
	}
}
