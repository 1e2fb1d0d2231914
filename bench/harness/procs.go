package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// stopGrace is how long a server gets between SIGTERM and SIGKILL.
const stopGrace = 3 * time.Second

// server is a long-running process started by the harness, in a session
// (so a process group) of its own, with stdout and stderr in a log file.
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

// sysProcAttr starts every process the harness runs (servers, load
// generators, CLIs) in a session of its own, which is also a process group
// of its own for the group kills. With the kernel's autogroup on
// (/proc/sys/kernel/sched_autogroup_enabled), a session is a scheduling
// group: each program is then scheduled as a service manager's service or
// a gateway's supervisor (started with setsid) is, not in one group with
// its load and its upstream. Measured on 2026-12-03: a `boundary serve`
// sharing the harness's session took 1.5-2.1 involuntary switches per
// tunnel under a load from a sandbox-like cgroup, the same binary in a
// session of its own 3.2-3.6, as the supervisor did; the supervisor's
// "same speed" rows compared the two placements, not the two boundaries.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
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

// runCmd runs a short-lived command in a session (so a process group) of
// its own, killed with the group when ctx ends, and returns its stdout. A
// non-zero exit is an error carrying the tail of stderr.
func runCmd(ctx context.Context, dir, path string, args ...string) ([]byte, error) {
	return runCmdEnv(ctx, dir, nil, path, args...)
}

// runCmdEnv is runCmd with env added to the harness's environment.
func runCmdEnv(ctx context.Context, dir string, env []string, path string, args ...string) ([]byte, error) {
	return runCmdOpts(ctx, dir, env, nil, path, args...)
}

// runCmdIn is runCmd with the process put in group as it starts (none
// when group is nil); the move is done before the process has done more
// than start.
func runCmdIn(ctx context.Context, dir string, group cgroup.Group, path string, args ...string) ([]byte, error) {
	return runCmdOpts(ctx, dir, nil, group, path, args...)
}

func runCmdOpts(ctx context.Context, dir string, env []string, group cgroup.Group, path string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	if err := startIn(cmd, group); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := cmd.Wait(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "..." + msg[len(msg)-600:]
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// startIn starts cmd and moves it into group (if any); a process that
// cannot be moved is killed, so no load runs outside its group.
func startIn(cmd *exec.Cmd, group cgroup.Group) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	if group == nil {
		return nil
	}
	if err := group.Add(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return fmt.Errorf("put in its cgroup: %w", err)
	}
	return nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; it is 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// cpuTime is a process's CPU time split as the kernel accounts it: in
// user mode (its own code: for stockade, Go's runtime included) and in the
// kernel on its behalf (system calls, the network stack they drive).
type cpuTime struct{ user, sys time.Duration }

func (c cpuTime) total() time.Duration { return c.user + c.sys }

func (c cpuTime) sub(o cpuTime) cpuTime { return cpuTime{user: c.user - o.user, sys: c.sys - o.sys} }

// procCPU returns the CPU time used by a process: utime and stime of all
// its threads and, with children, those of its reaped children too (fields
// 14-15, and 16-17, of /proc/<pid>/stat).
func procCPU(pid int, children bool) (cpuTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTime{}, fmt.Errorf("read cpu time: %w", err)
	}
	user, sys, err := parseStatTicks(b, children)
	if err != nil {
		return cpuTime{}, fmt.Errorf("read cpu time of %d: %w", pid, err)
	}
	return cpuTime{user: time.Duration(user) * time.Second / clockTicks, sys: time.Duration(sys) * time.Second / clockTicks}, nil
}

// parseStatTicks returns utime and stime (plus cutime and cstime with
// children) of a /proc/<pid>/stat line, in clock ticks.
func parseStatTicks(stat []byte, children bool) (user, sys int64, err error) {
	// The command name may contain spaces; fields restart after ")".
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("%d fields in stat", len(f))
	}
	last := 13 // fields 14 and 15, counting pid as 1
	if children {
		last = 15 // and 16, 17
	}
	for j, s := range f[11:last] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("stat field %q: %w", s, err)
		}
		if j%2 == 0 {
			user += v
		} else {
			sys += v
		}
	}
	return user, sys, nil
}

// streamCmd runs a short-lived command like runCmd but hands each line of
// its stdout to onLine as it comes (a line longer than 1 MiB is an error).
// An error from onLine stops the command.
func streamCmd(ctx context.Context, dir, path string, args []string, onLine func([]byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stderr = &stderr
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lineErr error
	for lineErr == nil && sc.Scan() {
		lineErr = onLine(sc.Bytes())
	}
	if lineErr != nil {
		cancel()
	} else if err := sc.Err(); err != nil {
		lineErr = fmt.Errorf("%s: read stdout: %w", filepath.Base(path), err)
		cancel()
	}
	_, _ = io.Copy(io.Discard, out) // let Wait reap a killed command
	if err := cmd.Wait(); err != nil && lineErr == nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 600 {
			msg = "..." + msg[len(msg)-600:]
		}
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, msg)
	}
	return lineErr
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
