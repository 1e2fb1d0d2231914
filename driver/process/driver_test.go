package process

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
)

// TestDriverStartAdoptRemove: Start writes the spec (0600) and the
// creation's log dir and starts the binary as `supervisor --spec FILE
// --log-file LOG` (it rotates its supervisor.log itself);
// Adopt finds it by pid (and refuses a pid without the marker); Err ends
// with the log's last line; Remove keeps the workspace only when asked.
func TestDriverStartAdoptRemove(t *testing.T) {
	state := t.TempDir()
	bin := filepath.Join(t.TempDir(), "fake-stockade")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"fake supervisor $*\"\nsleep 30\necho never\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(Config{StateDir: state, Binary: bin, Gateway: "127.0.0.1:1",
		Credentials: func(name string) (spec.Credentials, error) {
			return spec.Credentials{CA: "ca", Cert: "c", Key: "k"}, nil
		}})
	l := contract.StateDir(state)
	ctx := context.Background()
	p, err := d.Start(ctx, driver.Launch{Instance: "i1", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(testenv.Path(t)(l.SpecFile("s")))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("spec file: %v %v, want mode 0600", st, err)
	}
	if sp, err := spec.Read(testenv.Path(t)(l.SpecFile("s"))); err != nil || sp.Instance != "i1" || sp.LogDir != testenv.Path(t)(l.Logs("s", "a1")) || sp.Workspace != d.Workspace("s") {
		t.Fatalf("spec: %+v %v", sp, err)
	}
	log := filepath.Join(testenv.Path(t)(l.Logs("s", "a1")), contract.SupervisorLog)
	deadline := time.Now().Add(5 * time.Second)
	for b, _ := os.ReadFile(log); !strings.Contains(string(b), "fake supervisor supervisor --spec "+testenv.Path(t)(l.SpecFile("s"))+" --log-file "+log); b, _ = os.ReadFile(log) {
		if time.Now().After(deadline) {
			t.Fatalf("supervisor log: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	a, err := d.Adopt(ctx, "s", p.Pid())
	if err != nil || a.Pid() != p.Pid() {
		t.Fatalf("adopt %d: %v", p.Pid(), err)
	}
	if _, err := d.Adopt(ctx, "s", os.Getpid()); !errors.Is(err, driver.ErrGone) {
		t.Fatalf("adopting a pid without the marker: %v", err)
	}
	// A pid read from a store is untrusted: a process whose command line
	// merely says "supervisor --spec" (another's, or a local user's) is not
	// adopted, and so never signalled as s's supervisor.
	other := exec.Command("/bin/sh", "-c", "sleep 30; : supervisor --spec "+filepath.Join(state, "elsewhere"), "supervisor", "--spec", filepath.Join(state, "elsewhere"))
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if _, err := d.Adopt(ctx, "s", other.Process.Pid); !errors.Is(err, driver.ErrGone) {
		t.Fatalf("adopting a stranger whose command line says supervisor --spec: %v", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Stop(sctx, time.Second); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	// Killed: its last log line is not why it ended, and is left out.
	if err := p.Err(); err == nil || strings.Contains(err.Error(), "fake supervisor") {
		t.Fatalf("exit error %v, want no log line in it", err)
	}
	// Its own last word ("stockade: <why>", as the binary prints an error)
	// is kept.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"some log line\"\necho \"stockade: supervisor: policy: broken\"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p2, err := d.Start(ctx, driver.Launch{Instance: "i2", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-p2.Done()
	if err := p2.Err(); err == nil || !strings.HasSuffix(err.Error(), "exit status 1: supervisor: policy: broken") {
		t.Fatalf("exit error %v, want the supervisor's last word in it", err)
	}

	if err := os.WriteFile(filepath.Join(d.Workspace("s"), "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(ctx, "s", "a1", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Workspace("s"), "kept")); err != nil {
		t.Fatalf("keep-workspace removed the workspace: %v", err)
	}
	if _, err := os.Stat(testenv.Path(t)(l.Logs("s", "a1"))); !os.IsNotExist(err) {
		t.Fatalf("the creation's logs outlived its delete: %v", err)
	}
	if err := d.Remove(ctx, "s", "a1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(testenv.Path(t)(l.Sandbox("s"))); !os.IsNotExist(err) {
		t.Fatalf("delete left %s: %v", testenv.Path(t)(l.Sandbox("s")), err)
	}
}

// TestDriverSpecGateways: the spec names this node's gateway and, with
// Config.Gateways, every node's, this node first and each once; without
// it, a supervisor's list is this node alone.
func TestDriverSpecGateways(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gateways func() []string
		want     []string // spec.Gateways
		list     []string // spec.GatewayList()
	}{
		{"single node", nil, nil, []string{"10.0.0.1:7420"}},
		{"cluster", func() []string {
			return []string{"10.0.0.2:7420", "", "10.0.0.1:7420", "10.0.0.3:7420", "10.0.0.2:7420"}
		},
			[]string{"10.0.0.1:7420", "10.0.0.2:7420", "10.0.0.3:7420"}, []string{"10.0.0.1:7420", "10.0.0.2:7420", "10.0.0.3:7420"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			bin := filepath.Join(t.TempDir(), "fake-stockade")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			d := New(Config{StateDir: state, Binary: bin, Gateway: "10.0.0.1:7420", Gateways: tc.gateways,
				Credentials: func(string) (spec.Credentials, error) { return spec.Credentials{CA: "ca", Cert: "c", Key: "k"}, nil }})
			p, err := d.Start(context.Background(), driver.Launch{Instance: "i1", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"true"}}})
			if err != nil {
				t.Fatal(err)
			}
			<-p.Done()
			sp, err := spec.Read(testenv.Path(t)(contract.StateDir(state).SpecFile("s")))
			if err != nil {
				t.Fatal(err)
			}
			if sp.Gateway != "10.0.0.1:7420" || !slices.Equal(sp.Gateways, tc.want) || !slices.Equal(sp.GatewayList(), tc.list) {
				t.Fatalf("spec gateway %q, gateways %q, list %q; want %q, %q", sp.Gateway, sp.Gateways, sp.GatewayList(), tc.want, tc.list)
			}
		})
	}
}

// TestDriverAdoptAgainSharesTheWatch: adopting a supervisor again (its
// sandbox actor restarted, or in a cluster its node owns the sandbox
// again) shares the watch the driver has: no pidfd and goroutine more per
// adoption, each living as long as the supervisor. Every adoption still
// sees its end.
func TestDriverAdoptAgainSharesTheWatch(t *testing.T) {
	state := t.TempDir()
	bin := filepath.Join(t.TempDir(), "fake-stockade")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(Config{StateDir: state, Binary: bin, Gateway: "127.0.0.1:1",
		Credentials: func(name string) (spec.Credentials, error) { return spec.Credentials{}, nil }})
	ctx := context.Background()
	p, err := d.Start(ctx, driver.Launch{Instance: "i1", Spec: store.Spec{Name: "s", UID: "a1", Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	var adopted []driver.Proc
	for range 50 {
		a, err := d.Adopt(ctx, "s", p.Pid())
		if err != nil {
			t.Fatal(err)
		}
		adopted = append(adopted, a)
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Fatalf("50 adoptions of one supervisor: goroutines %d -> %d", before, g)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Stop(sctx, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, a := range adopted {
		select {
		case <-a.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("an adoption did not see its supervisor end")
		}
	}
}

// TestDriverRemoveLeftGroup: the cgroup a killed supervisor left behind
// goes with the sandbox's delete (and one of another gateway's sandbox of
// the same name stays).
func TestDriverRemoveLeftGroup(t *testing.T) {
	testenv.NeedRoot(t)
	state, other := t.TempDir(), t.TempDir()
	l := contract.StateDir(state)
	left, err := cgroup.New(cgroup.SandboxGroup("s", testenv.Path(t)(l.Sandbox("s"))), cgroup.Limits{})
	if err != nil {
		testenv.Unavailable(t, "no cgroup: %v", err)
	}
	t.Cleanup(func() { _ = left.Remove() })
	kept, err := cgroup.New(cgroup.SandboxGroup("s", testenv.Path(t)(contract.StateDir(other).Sandbox("s"))), cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kept.Remove() })
	d := New(Config{StateDir: state})
	if err := d.Remove(context.Background(), "s", "a1", false); err != nil {
		t.Fatal(err)
	}
	if procs, err := left.Procs(); err == nil {
		t.Fatalf("the left group is still there (procs %v)", procs)
	}
	if _, err := kept.Procs(); err != nil {
		t.Fatalf("another gateway's group went too: %v", err)
	}
}
