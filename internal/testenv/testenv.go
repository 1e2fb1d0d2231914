// Package testenv owns the test-only rules every stockade test follows:
// a test that needs a tool, root or namespaces skips with a reason outside
// CI and fails in CI (CI=true), so a green CI never hides a skipped test;
// and waiting is done by polling for a state with a deadline, never by
// trusting a sleep (this VM's clock can jump).
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t outside CI and fails it in CI, naming why.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: "+format, args...)
	}
	t.Skipf("skipped outside CI: "+format, args...)
}

// NeedTool returns the path of a command-line tool or calls Unavailable.
func NeedTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		p, err = exec.LookPath("/usr/sbin/" + name) // not on every user's PATH
	}
	if err != nil {
		Unavailable(t, "%s not found (apt-get install %s)", name, pkg)
	}
	return p
}

// PreloadLib builds with gcc, in dir, a shared library whose constructor
// does nothing (libpre.so) and returns its path: what a hostile workload
// preloads into an allowed binary (LD_PRELOAD), as the attack tests play.
func PreloadLib(t testing.TB, dir string) string {
	t.Helper()
	gcc := NeedTool(t, "gcc", "gcc")
	src, lib := filepath.Join(dir, "pre.c"), filepath.Join(dir, "libpre.so")
	if err := os.WriteFile(src, []byte("__attribute__((constructor)) static void pre(void) {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return lib
}

// NeedRoot calls Unavailable unless the test runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// OpenHostDir returns a new world-writable host directory outside /tmp
// (under /var/lib; a sandbox's /tmp is its own), removed when t ends: only
// a sandbox's policy stands between its workload and it. Root only.
func OpenHostDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/lib", "stockade-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// Eventually polls cond every 10 ms until it returns true or timeout
// passes, then fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BuildStockade builds the stockade binary from pkg (a path relative to
// the calling test's directory, e.g. "../cmd/stockade") into a fresh
// temporary directory readable by every user (tests run gateways as other
// users too). Call it from TestMain; cleanup removes the directory.
func BuildStockade(pkg string) (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "stockade-bin-")
	if err != nil {
		return "", nil, fmt.Errorf("build stockade: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o755); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build stockade: %w", err)
	}
	bin = filepath.Join(dir, "stockade")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("build stockade: %w\n%s", err, out)
	}
	return bin, cleanup, nil
}

// MainWithStockade is a TestMain body for packages that run the real
// binary: it builds pkg into *bin, runs the tests and removes the build.
func MainWithStockade(m *testing.M, pkg string, bin *string) int {
	b, cleanup, err := BuildStockade(pkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	*bin = b
	return m.Run()
}

// Path returns a function that returns the path of a (path, error) pair
// (contract.StateDir's methods) and fails t on the error:
// testenv.Path(t)(layout.Workspace("demo")).
func Path(t testing.TB) func(string, error) string {
	return func(p string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}
