package testworld

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

var bin string // the stockade binary

func TestMain(m *testing.M) { os.Exit(testenv.MainWithStockade(m, "../../cmd/stockade", &bin)) }

// boundary is a `boundary serve` spec on free ports (identity none: no
// privileges needed; its files are readable by every user).
func boundary(t *testing.T, extra ...string) Spec {
	dir := Dir(t, 0)
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nnetwork_policies: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 api.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"boundary", "serve", "--log-format", "json", "--identity", "none", "--policy", pol, "--hosts", hosts,
		"--proxy", "127.0.0.1:0", "--dns", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}
	return Spec{Bin: bin, Name: "boundary", Args: append(args, extra...), Timeout: 20 * time.Second}
}

// TestBoundaryReadyFile: the real boundary writes its ready file (mode
// 0644, its pid, the addresses it serves) and removes it on a clean exit.
func TestBoundaryReadyFile(t *testing.T) {
	p := Start(t, boundary(t))
	if p.Addrs.PID != p.Cmd.Process.Pid || p.Addrs.Proxy == "" || p.Addrs.DNS == "" || p.Addrs.Metrics == "" {
		t.Fatalf("ready file: %+v (pid %d)", p.Addrs, p.Cmd.Process.Pid)
	}
	for _, a := range []string{p.Addrs.Proxy, p.Addrs.Metrics} {
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatalf("the ready file names %s but nothing listens: %v", a, err)
		}
		_ = c.Close()
	}
	if fi, err := os.Stat(p.ReadyFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("ready file: %v %v; want mode 0644", err, fi)
	}
	if !strings.Contains(p.Log.String(), `"msg":"boundary ready"`) {
		t.Fatalf("the log was not captured:\n%s", p.Log)
	}
	if err := p.Stop(15 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(p.ReadyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ready file after a clean exit: %v; want it removed", err)
	}
}

// TestExitBeforeReady: a process that dies first is an error naming that
// and the tail of its log (here: the policy error with file:line).
func TestExitBeforeReady(t *testing.T) {
	s := boundary(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Args = append(s.Args, "--policy", bad)
	s.Dir = t.TempDir()
	_, err := StartProcess(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "bad.yaml:1:") {
		t.Fatalf("err = %v; want 'exited before it was ready' and the log tail naming bad.yaml:1:", err)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("err does not wrap the exit status 2: %v", err)
	}
	t.Logf("as reported: %v", err)
}

// TestAddrInUseRetry: a start on a taken port fails with EADDRINUSE; with
// RetryInUse it succeeds once the port is free (a restart on a fixed port).
func TestAddrInUseRetry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := ln.Addr().String()
	s := boundary(t, "--proxy", taken)
	s.Dir = t.TempDir()
	if _, err := StartProcess(context.Background(), s); !errors.Is(err, syscall.EADDRINUSE) {
		_ = ln.Close()
		t.Fatalf("start on a taken port: %v; want EADDRINUSE", err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = ln.Close()
	}()
	s.RetryInUse = 20 * time.Second
	p, err := StartProcess(context.Background(), s)
	if err != nil {
		t.Fatalf("start with RetryInUse: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop(15 * time.Second) })
	if p.Addrs.Proxy != taken {
		t.Fatalf("proxy on %s, want %s", p.Addrs.Proxy, taken)
	}
}

// TestNotReadyInTime: a process that never writes its ready file is
// killed at the deadline, and a stale ready file does not count.
func TestNotReadyInTime(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	stale := fmt.Sprintf(`{"api":"127.0.0.1:1","pid":%d}`, os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, "sleeper.ready"), []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Spec{Bin: "/bin/sh", Name: "sleeper", Dir: dir, Timeout: 500 * time.Millisecond,
		Args: []string{"-c", `echo $$ > "$0"; exec sleep 60`, pidFile}}
	_, err := StartProcess(context.Background(), s)
	if err == nil || !strings.Contains(err.Error(), "not ready within 500ms") {
		t.Fatalf("err = %v; want 'not ready within 500ms'", err)
	}
	t.Logf("as reported: %v", err)
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("the helper did not run (pid file %q)", b)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the process not ready in time still runs (pid %d): %v", pid, err)
	}
}

// TestRunAsUser: the boundary runs as another user and writes its ready
// file into a Dir made for that user.
func TestRunAsUser(t *testing.T) {
	testenv.NeedRoot(t)
	const nobody = 65534
	s := boundary(t)
	s.UID = nobody
	p := Start(t, s)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Addrs.PID))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\nUid:\t65534\t") {
		t.Fatalf("the boundary does not run as uid %d:\n%s", nobody, b)
	}
	if fi, err := os.Stat(p.ReadyFile); err != nil || fi.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Fatalf("ready file not written by uid %d: %v", nobody, err)
	}
}

// TestCoreImportsNoTesting: the stockade binary links this package (the
// chaos run): it must not pull in "testing".
func TestCoreImportsNoTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/stockade-dev/stockade/internal/testworld").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "testing" {
			t.Fatal(`internal/testworld imports "testing"; keep it to the _test files (use the TB interface)`)
		}
	}
}
