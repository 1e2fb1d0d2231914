package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testworld"
)

// restartWithDefaultRelay restarts w's gateway on its API address like
// startGateway, but without --relay-listen (the default: the --listen host,
// a free port) and with extra flags instead of the harness's boundary
// flags when boundary is given.
func (w *world) restartWithDefaultRelay(boundary []string) {
	w.t.Helper()
	if err := w.proc.Stop(10 * time.Second); err != nil {
		w.t.Fatalf("stop gateway: %v", err)
	}
	if boundary == nil {
		boundary = []string{"--hosts", w.hosts, "--allow-loopback-upstream"}
	}
	args := append([]string{"gateway", "run", "--state-dir", w.state, "--listen", w.addr, "--log-format", "json"}, boundary...)
	p := testworld.Start(w.t, testworld.Spec{Bin: bin, Args: args, Name: "gateway", UID: w.uid,
		Timeout: 20 * time.Second, RetryInUse: 10 * time.Second})
	w.proc, w.gw, w.gwLog, w.addr, w.metrics = p, p.Cmd, p.Log, p.Addrs.API, p.Addrs.Metrics
	w.gwDone = make(chan error, 1)
	go func(done chan<- error) { done <- p.Err() }(w.gwDone)
}

// TestPortsTwoGatewaysSideBySide: two gateways on 127.0.0.1 with different
// --listen ports and state dirs and no --relay-listen run side by side
// (the relay port follows --listen: its host, a free port), each with a
// sandbox that `sandbox exec` reaches; a gateway restarted on its address
// gets another relay port, and its re-adopted supervisor is told it with
// the next OpenRelay.
func TestPortsTwoGatewaysSideBySide(t *testing.T) {
	a, b := newWorld(t, 0), newWorld(t, 0)
	a.restartWithDefaultRelay(nil)
	b.restartWithDefaultRelay(nil)
	if a.addr == b.addr {
		t.Fatalf("both gateways on %s", a.addr)
	}
	relayA, relayB := a.proc.Addrs.Relay, b.proc.Addrs.Relay
	for _, r := range []string{relayA, relayB} {
		host, _, err := net.SplitHostPort(r)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("relay %q: want the --listen host 127.0.0.1 (%v)", r, err)
		}
	}
	if relayA == relayB {
		t.Fatalf("both gateways advertise relay %s", relayA)
	}
	for _, w := range []*world{a, b} {
		w.create("side", `exec sleep 1000`)
	}
	for i, w := range []*world{a, b} {
		out, errOut, code := w.execIn("side", fmt.Sprintf(`echo gateway %d`, i))
		if want := fmt.Sprintf("gateway %d\n", i); code != 0 || out != want {
			t.Fatalf("exec on gateway %s: exit %d %q %s, want %q", w.addr, code, out, errOut, want)
		}
	}
	// Gateway a again, on the same API address: a new relay listener.
	a.restartWithDefaultRelay(nil)
	if a.proc.Addrs.Relay == "" {
		t.Fatal("no relay address in the ready file")
	}
	a.waitPhase("side", "Ready", 30*time.Second, nil)
	out, errOut, code := a.execIn("side", `echo again`)
	if code != 0 || out != "again\n" {
		t.Fatalf("exec after the restart (relay %s -> %s): exit %d %q %s", relayA, a.proc.Addrs.Relay, code, out, errOut)
	}
	// Negative: a relay address another process holds is refused with a
	// message naming the flag.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, errOut, code = run(t, nil, "gateway", "run", "--state-dir", sharedDir(t, 0), "--listen", "127.0.0.1:0", "--relay-listen", ln.Addr().String())
	if code == 0 || !strings.Contains(errOut, "relay address "+ln.Addr().String()) || !strings.Contains(errOut, "--relay-listen") {
		t.Fatalf("relay address in use: exit %d, %s", code, errOut)
	}
}
