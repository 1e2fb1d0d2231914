package e2e

import (
	"bytes"
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

// freePorts are n distinct ports on 127.0.0.1 nothing listens on right now.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close() // held until all are chosen: distinct
		out = append(out, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	return out
}

// TestMakeRunCleansUp: `make run` (examples/run.sh) on addresses from the
// environment brings its demo sandbox to Ready, and Ctrl-C (SIGINT to the
// terminal's process group) leaves nothing behind: no temporary dir (it
// holds the client credential) and no gateway, supervisor or upstream.
func TestMakeRunCleansUp(t *testing.T) {
	testenv.NeedRoot(t)                 // the demo runs a sandbox
	testenv.NeedTool(t, "go", "golang") // it builds its upstream
	tmp := t.TempDir()
	var out testenv.Buffer
	cmd := exec.Command("bash", "examples/run.sh")
	cmd.Dir = ".."
	ports := freePorts(t, 2)
	cmd.Env = append(os.Environ(), "BIN="+bin, "TMPDIR="+tmp,
		"STOCKADE_LISTEN=127.0.0.1:"+ports[0], "STOCKADE_UPSTREAM_PORT="+ports[1])
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, as a terminal's job
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "Ctrl-C stops everything.") {
		select {
		case err := <-done:
			t.Fatalf("make run ended before its demo was up (%v):\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run: no demo within 2 minutes:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "demo: Ready") {
		t.Fatalf("the demo sandbox did not reach Ready:\n%s", out.String())
	}
	runs, _ := filepath.Glob(filepath.Join(tmp, "stockade-run.*"))
	if len(runs) != 1 {
		t.Fatalf("temporary dirs while running: %v, want one", runs)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("make run did not end within 60 s of Ctrl-C:\n%s", out.String())
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "stockade-run.*")); len(left) != 0 {
		t.Fatalf("Ctrl-C left %v behind (the client credential is in there)", left)
	}
	var ps bytes.Buffer
	pg := exec.Command("pgrep", "-fa", runs[0])
	pg.Stdout = &ps
	_ = pg.Run()
	if s := strings.TrimSpace(ps.String()); s != "" {
		t.Fatalf("processes left after Ctrl-C:\n%s", s)
	}
}
