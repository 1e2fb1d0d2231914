package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestReadoptedSandboxNamesChangedSettings: a gateway restarted with other
// boundary flags re-adopts a running sandbox, which keeps the settings it
// started with; `sandbox get` says which changed and that a stop and start
// applies them; after that it says nothing more. A restart with the same
// flags says nothing.
func TestReadoptedSandboxNamesChangedSettings(t *testing.T) {
	w := newWorld(t, 0)
	w.create("drift", `exec sleep 1000`)
	const note = "gateway settings changed since this sandbox started"

	w.restartWithDefaultRelay(nil) // the harness's boundary flags
	s := w.waitPhase("drift", "Ready", 30*time.Second, nil)
	if strings.Contains(s.Message, note) {
		t.Fatalf("same boundary flags, yet: %q", s.Message)
	}

	w.restartWithDefaultRelay([]string{"--hosts", w.hosts, "--max-conns", "7"}) // no --allow-loopback-upstream
	s = w.waitPhase("drift", "Ready", 30*time.Second, nil)
	want := note + " (allow-loopback-upstream, max-conns): stop and start it to apply"
	if !strings.Contains(s.Message, want) {
		t.Fatalf("re-adopted after a flag change: message %q, want it to contain %q", s.Message, want)
	}
	if out, _, _ := w.cli("get", "drift"); !strings.Contains(out, want) {
		t.Fatalf("get (text) does not show it:\n%s", out)
	}
	for _, verb := range []string{"stop", "start"} {
		if _, errOut, code := w.cli(verb, "drift"); code != 0 {
			t.Fatalf("%s: %d %s", verb, code, errOut)
		}
		w.waitPhase("drift", map[string]string{"stop": "Stopped", "start": "Ready"}[verb], 30*time.Second, nil)
	}
	if s, _ := w.get("drift"); strings.Contains(s.Message, note) {
		t.Fatalf("after stop and start: %q", s.Message)
	}
}
