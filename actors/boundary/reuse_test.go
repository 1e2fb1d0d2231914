package boundary_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// TestConnActorServesOneConnectionAtATime: a conn actor whose connection
// has ended serves the next one (one actor for a run of sequential
// tunnels), carries nothing of the earlier connection into the next (a
// denial after allowed tunnels is audited with its own destination and
// verdict), and one that failed is stopped and never handed another
// connection: the next connection gets a new actor and is served.
func TestConnActorServesOneConnectionAtATime(t *testing.T) {
	e := startEnv(t, envOpts{})
	st := e.b.Stats()
	idleAgain := func(what string) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool { return st.IdleConns.Load() == 1 },
			"the conn actor back in the idle stack after %s (idle %d)", what, st.IdleConns.Load())
	}

	const tunnels = 20
	for i := range tunnels {
		code, body, c := e.connect(t, "up.test", e.echoPort)
		if code != 200 {
			t.Fatalf("tunnel %d: %d %s", i, code, body)
		}
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("tunnel %d echo: %q %v", i, buf, err)
		}
		_ = c.Close()
		idleAgain("a tunnel")
	}
	if n := st.ConnActors.Load(); n != 1 {
		t.Fatalf("%d sequential tunnels spawned %d conn actors, want 1", tunnels, n)
	}

	code, body, _ := e.connect(t, "denied.test", e.echoPort)
	if code != 403 || !strings.Contains(body, string(reason.EndpointNotAllowed)) {
		t.Fatalf("denied.test after %d tunnels: %d %s", tunnels, code, body)
	}
	idleAgain("a denial")
	e.audit.mu.Lock()
	last := e.audit.events[len(e.audit.events)-1]
	e.audit.mu.Unlock()
	if last.ActionID != audit.ActionDenied || last.Reason != reason.EndpointNotAllowed || last.Dst == nil || last.Dst.Hostname != "denied.test" {
		t.Fatalf("the denial's audit record carries %+v (dst %+v), want its own denied destination", last, last.Dst)
	}
	if n := st.ConnActors.Load(); n != 1 {
		t.Fatalf("conn actors spawned: %d, want still 1", n)
	}

	// A failure: the actor is stopped with its connection, not reused.
	e.faults.Arm(fault.IdentityLookup, fault.Rule{Kind: fault.KindPanic, Count: 1})
	code, body, _ = e.connect(t, "up.test", e.echoPort)
	if code != 403 || !strings.Contains(body, string(reason.IdentityUnavailable)) {
		t.Fatalf("connection whose actor panics: %d %s, want 403 identity_unavailable", code, body)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return stopsOf(e.b, "conn") == 1 }, "the failed conn actor stopped")
	if n := st.IdleConns.Load(); n != 0 {
		t.Fatalf("idle conn actors after the failure: %d, want 0 (the failed one must not come back)", n)
	}
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("next connection after the failure: %d %s", code, body)
	}
	_ = c.Close()
	idleAgain("the connection after the failure")
	if n := st.ConnActors.Load(); n != 2 {
		t.Fatalf("conn actors spawned after the failure: %d, want 2", n)
	}
	if n := e.audit.count(audit.ClassNetwork, reason.None); n != tunnels+1 {
		t.Fatalf("allowed tunnels audited: %d, want %d", n, tunnels+1)
	}
}
