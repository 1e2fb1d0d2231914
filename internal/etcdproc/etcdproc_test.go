package etcdproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestExitBeforeHealthy: a program that exits at once fails the start
// with its exit error and the end of its output, and leaves nothing
// running.
func TestExitBeforeHealthy(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	script := filepath.Join(t.TempDir(), "fake-etcd")
	if err := os.WriteFile(script, []byte("#!"+sh+"\necho 'listen tcp: bind: address already in use' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := &testenv.Buffer{}
	s, err := Start(context.Background(), Config{Bin: script, DataDir: t.TempDir(), Output: out})
	if err == nil {
		_ = s.Stop()
		t.Fatal("a program that exits at once started")
	}
	for _, want := range []string{"exited before it was healthy", "exit status 3", "etcd's output ends:\nlisten tcp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %q is not EADDRINUSE, though the output says an address was in use", err)
	}
}

// TestKillRestartStop: a real etcd logging to a file is paused, restarted
// on its data dir and ports, killed and stopped.
func TestKillRestartStop(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "etcd.log")
	s, err := Start(context.Background(), Config{
		Bin:     testenv.NeedTool(t, "etcd", "etcd-server"),
		DataDir: filepath.Join(dir, "data"),
		LogPath: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	url, pid := s.ClientURL(), s.Pid()
	if !strings.HasPrefix(url, "http://127.0.0.1:") || pid == 0 {
		t.Fatalf("ClientURL %q, Pid %d", url, pid)
	}
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(context.Background()); err != nil { // continues, kills, starts "existing"
		t.Fatalf("restart a paused etcd: %v", err)
	}
	if s.ClientURL() != url || s.Pid() == pid || s.Pid() == 0 {
		t.Errorf("after the restart: ClientURL %q, Pid %d; want %q and a new pid (was %d)", s.ClientURL(), s.Pid(), url, pid)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() != 0 || s.Signal(syscall.SIGCONT) == nil {
		t.Errorf("after Kill: Pid %d, and Signal did not fail", s.Pid())
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatalf("restart a killed etcd: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(log); err != nil {
		t.Errorf("no log file: %v", err)
	}
}
