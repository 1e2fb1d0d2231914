package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartIsDetachedAndStops(t *testing.T) {
	dir := t.TempDir()
	h, err := Start(Spec{Binary: "/bin/sh", Args: []string{"-c", "echo started; exec sleep 30"}, Out: logFile(t, filepath.Join(dir, "log"))})
	if err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if sid, _ := strconv.Atoi(f[3]); sid != h.Pid {
		t.Fatalf("supervisor session id %d, want its own (%d): it must outlive the gateway's session", sid, h.Pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		if strings.Contains(string(b), "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log file has %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Stop(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if h.Err() == nil {
		t.Fatal("no exit reason")
	}
}

func TestAdoptWatchesAndRejectsStrangers(t *testing.T) {
	h, err := Start(Spec{Binary: "/bin/sleep", Args: []string{"30"}, Out: logFile(t, filepath.Join(t.TempDir(), "log"))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Signal(syscall.SIGKILL); <-h.Done() }()
	deadline := time.Now().Add(5 * time.Second) // until the child has exec'd sleep
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/cmdline")
		if strings.Contains(string(b), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child never exec'd sleep: %q", b)
		}
		time.Sleep(time.Millisecond)
	}
	sleep30 := func(argv []string) bool { return len(argv) == 2 && argv[0] == "/bin/sleep" && argv[1] == "30" }
	// A command line that merely contains the word is not the program.
	if _, err := Adopt(h.Pid, func(argv []string) bool { return len(argv) == 2 && argv[1] == "3" }); !errors.Is(err, ErrGone) {
		t.Fatalf("adopting with a wrong command line: %v, want ErrGone", err)
	}
	a, err := Adopt(h.Pid, sleep30)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Signal(syscall.SIGKILL)
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("adopted handle did not see the exit")
	}
	if _, err := Adopt(h.Pid, sleep30); !errors.Is(err, ErrGone) {
		t.Fatalf("adopting a dead pid: %v, want ErrGone", err)
	}
	if _, err := Adopt(0, sleep30); !errors.Is(err, ErrGone) {
		t.Fatal("pid 0 adopted")
	}
}

// logFile opens path for a supervisor's output, closed with the test.
func logFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
