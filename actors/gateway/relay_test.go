package gateway

import (
	"net"
	"strings"
	"testing"
)

// TestListenRelay: no --relay-listen is the --listen host on a free port;
// a wildcard listens everywhere and is advertised as the --listen host; an
// address in use fails naming it and the flag.
func TestListenRelay(t *testing.T) {
	ln, adv, err := listenRelay("", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host, port, _ := net.SplitHostPort(adv)
	if host != "127.0.0.1" || port == "0" || adv != ln.Addr().String() {
		t.Fatalf("default relay: advertised %s, listening on %s", adv, ln.Addr())
	}
	ln2, adv2, err := listenRelay("", "127.0.0.1")
	if err != nil {
		t.Fatalf("a second gateway's default relay: %v", err)
	}
	defer ln2.Close()
	if adv2 == adv {
		t.Fatalf("two default relays on %s", adv)
	}

	wild, advWild, err := listenRelay("0.0.0.0:0", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	_, wport, _ := net.SplitHostPort(wild.Addr().String())
	if advWild != net.JoinHostPort("127.0.0.1", wport) {
		t.Fatalf("wildcard relay advertised as %s, want 127.0.0.1:%s", advWild, wport)
	}

	if _, _, err := listenRelay(adv, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), adv) || !strings.Contains(err.Error(), "--relay-listen") {
		t.Fatalf("relay address in use: %v", err)
	}
}
