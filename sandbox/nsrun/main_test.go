package nsrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestMain lets the test binary be the sandbox's init and exec stages, and
// the helper supervisors of the death and unprivileged tests.
func TestMain(m *testing.M) {
	MaybeRunStage()
	switch os.Getenv(helperEnv) {
	case helperSupervisor:
		os.Exit(supervisorHelper())
	case helperUnprivileged:
		os.Exit(unprivilegedHelper())
	case helperSeccomp:
		os.Exit(seccompHelper())
	}
	os.Exit(m.Run())
}

// baseReadOnly lets a shell and the coreutils run.
func baseReadOnly() []string { return []string{"/usr", "/bin", "/lib", "/lib64"} }

// lockedBuffer is a goroutine-safe stderr sink for a workload.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// needSandbox skips outside CI (fails in CI) when sandboxes cannot run.
func needSandbox(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t)
	testenv.NeedTool(t, "bash", "bash")
}

// testIDBase is the host id range of the tests' sandboxes as root: the
// unused 65,536 ids below 2^31, outside the default uid pool (package
// idrange), so no gateway's sandbox has them.
const testIDBase = 0x7FFF0000

// bashSpec is a sandbox running script under bash with the workspace
// read-write and the system read-only.
func bashSpec(t *testing.T, script string) Spec {
	t.Helper()
	return Spec{
		Argv:       []string{"/bin/bash", "-c", script},
		Workspace:  t.TempDir(),
		HostIDBase: testIDBase,
		Filesystem: Filesystem{
			ReadOnly:  baseReadOnly(),
			ReadWrite: []string{WorkspaceMount},
			Mode:      HardRequirement,
		},
	}
}

// start starts spec (stderr captured into the test log) and closes the
// sandbox when the test ends.
func start(t *testing.T, spec Spec) *Sandbox {
	t.Helper()
	stderr := &lockedBuffer{}
	if spec.Stderr == nil {
		spec.Stderr = stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if s := stderr.String(); s != "" {
			t.Logf("workload stderr:\n%s", s)
		}
	})
	return sb
}

// wait waits at most 10 s for the workload's exit.
func wait(t *testing.T, sb *Sandbox) ExitStatus {
	t.Helper()
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("workload did not exit within 10s")
	}
	st, err := sb.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return st
}

// run starts spec, waits for the workload and requires exit 0.
func run(t *testing.T, spec Spec) *Sandbox {
	t.Helper()
	sb := start(t, spec)
	if st := wait(t, sb); !st.Success() {
		t.Fatalf("workload: %s", st)
	}
	return sb
}

// readWS reads a file the workload wrote into the workspace.
func readWS(t *testing.T, spec Spec, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(spec.Workspace, name))
	if err != nil {
		t.Fatalf("workspace file: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// procStatus returns the named field of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("status of %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// pidGone reports whether the host pid no longer exists (or is a zombie
// about to be reaped).
func pidGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}
