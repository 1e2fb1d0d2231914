package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// stopGrace is how long a server gets between SIGTERM and SIGKILL.
const stopGrace = 3 * time.Second

// server is a long-running process started by the harness, in its own
// process group, with stdout and stderr in a log file.
type server struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // valid once done is closed
}

// servers tracks every server started so that all of them are stopped.
type servers struct {
	dir  string
	log  zerolog.Logger
	mu   sync.Mutex
	list []*server
}

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// start runs path with args; its output goes to <dir>/<name>.log.
func (s *servers) start(name, path string, args ...string) (*server, error) {
	logPath := filepath.Join(s.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	srv := &server{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { srv.err = cmd.Wait(); close(srv.done) }()
	s.mu.Lock()
	s.list = append(s.list, srv)
	s.mu.Unlock()
	s.log.Debug().Str("server", name).Int("pid", cmd.Process.Pid).Strs("args", args).Msg("started")
	return srv, nil
}

// stopAll stops every server, newest first.
func (s *servers) stopAll() {
	s.mu.Lock()
	list := s.list
	s.list = nil
	s.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop()
		s.log.Debug().Str("server", list[i].name).Msg("stopped")
	}
}

func (srv *server) pid() int { return srv.cmd.Process.Pid }

func (srv *server) exited() bool {
	select {
	case <-srv.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the server's process group, then SIGKILL after
// stopGrace, and waits for the server to be reaped.
func (srv *server) stop() {
	pgid := -srv.pid()
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-srv.done:
	case <-time.After(stopGrace):
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL) // stragglers in the group too
	<-srv.done
}

// failure describes why a server is not usable: its exit status if it has
// exited and the tail of its log.
func (srv *server) failure(err error) error {
	msg := err.Error()
	if srv.exited() {
		msg = fmt.Sprintf("%s (exited: %v)", msg, srv.err)
	}
	return fmt.Errorf("%s: %s; log tail: %s", srv.name, msg, tail(srv.log, 5))
}

// waitFor polls check every 20ms until it succeeds, the server exits or
// the timeout passes.
func (srv *server) waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if srv.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return srv.failure(fmt.Errorf("not ready after %s: %w", timeout, err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dialCheck is a readiness check: a TCP connection to addr succeeds.
func dialCheck(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// tail returns the last n non-empty lines of a file, joined by " | ".
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "(empty)"
	}
	return strings.Join(lines, " | ")
}

// runCmd runs a short-lived command in its own process group, killed with
// the group when ctx ends, and returns its stdout. A non-zero exit is an
// error carrying the tail of stderr.
func runCmd(ctx context.Context, dir, path string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "..." + msg[len(msg)-600:]
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the CPU time used by a process: utime+stime of all its
// threads plus that of its reaped children (fields 14-17 of
// /proc/<pid>/stat).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu time: %w", err)
	}
	// The command name may contain spaces; fields restart after ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("read cpu time of %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("read cpu time of %d: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:15] { // fields 14..17, counting pid as 1
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read cpu time of %d: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, errors.Join(l.Close())
}
