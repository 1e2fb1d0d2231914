package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
)

// TestDriftOfAdoptedSupervisor: a supervisor adopted by a gateway whose
// boundary settings differ from those it was started with says which
// differ and how to apply them; same settings (MaxConns 0 and 1024 are the
// same), a supervisor started by this driver, and a missing spec file say
// nothing.
func TestDriftOfAdoptedSupervisor(t *testing.T) {
	state := t.TempDir()
	bin := filepath.Join(t.TempDir(), "fake-stockade")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{StateDir: state, Binary: bin, Gateway: "127.0.0.1:1", Hosts: "/etc/hosts", MaxConns: 0,
		Credentials: func(string) (spec.Credentials, error) { return spec.Credentials{CA: "ca", Cert: "c", Key: "k"}, nil }}
	ctx := context.Background()
	p, err := New(cfg).Start(ctx, driver.Launch{Instance: "i1", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = p.Stop(sctx, 0)
	})
	// Adopt checks the command line for the marker: wait until the
	// child has exec'd the fake binary (right after fork it still shows
	// the test's own command line).
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cmdline")
		if strings.Contains(string(b), Marker) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d's command line %q never had %q", p.Pid(), b, Marker)
		}
		time.Sleep(5 * time.Millisecond)
	}
	drift := func(c Config, name string) string {
		t.Helper()
		a, err := New(c).Adopt(ctx, name, p.Pid())
		if err != nil {
			t.Fatalf("adopt: %v", err)
		}
		d, ok := a.(interface{ Drift() string })
		if !ok {
			t.Fatal("an adopted process driver Proc has no Drift method")
		}
		return d.Drift()
	}
	if d, ok := p.(interface{ Drift() string }); !ok || d.Drift() != "" {
		t.Errorf("a supervisor this driver started: drift %q", d.Drift())
	}
	same := cfg
	same.MaxConns = defaultMaxConns
	if got := drift(same, "s"); got != "" {
		t.Errorf("same settings: drift %q", got)
	}
	changed := cfg
	changed.AllowLoopback, changed.MaxConns, changed.Hosts = true, 10, ""
	want := "gateway settings changed since this sandbox started (allow-loopback-upstream, hosts, max-conns): stop and start it to apply"
	if got := drift(changed, "s"); got != want {
		t.Errorf("changed settings:\n got %q\nwant %q", got, want)
	}
	changed = cfg
	changed.DNSUpstream = "192.0.2.53:53"
	if got := drift(changed, "s"); got != "gateway settings changed since this sandbox started (dns-upstream): stop and start it to apply" {
		t.Errorf("dns-upstream: %q", got)
	}
	// No spec file any more: nothing to compare.
	if err := os.Remove(testenv.Path(t)(contract.StateDir(state).SpecFile("s"))); err != nil {
		t.Fatal(err)
	}
	if got := drift(changed, "s"); got != "" {
		t.Errorf("no spec file: drift %q", got)
	}
	// The supervisor of s is not adopted as another sandbox's.
	if _, err := New(cfg).Adopt(ctx, "other", p.Pid()); !errors.Is(err, driver.ErrGone) {
		t.Errorf("s's supervisor adopted as other's: %v", err)
	}
}
