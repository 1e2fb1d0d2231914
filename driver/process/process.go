// Package process owns the `process` driver: it starts `stockade
// supervisor` for a sandbox in its own session and process group (so it
// outlives a gateway restart), watches it through a pidfd (which works for
// a supervisor started by an earlier gateway, not only for children), and
// stops it with SIGTERM, then SIGKILL after a grace period.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec is what the driver needs to start one supervisor.
type Spec struct {
	// Binary is the stockade binary (default: this process's executable).
	Binary string
	// Args are the supervisor's arguments after the binary.
	Args []string
	// Env is added to the supervisor's environment.
	Env []string
	// Out receives the supervisor's stdout and stderr (the caller opened
	// it, appending, and closes it after Start).
	Out *os.File
	// Dir is the working directory.
	Dir string
}

// Handle is a started (or adopted) supervisor.
type Handle struct {
	Pid  int
	pfd  int
	done chan struct{}
	err  error // set before done closes
}

// Start starts the supervisor detached (setsid) and returns its handle.
func Start(s Spec) (*Handle, error) {
	bin := s.Binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("driver: find stockade binary: %w", err)
		}
		bin = exe
	}
	if s.Out == nil {
		return nil, errors.New("driver: start supervisor: no file for its output")
	}
	out := s.Out
	cmd := exec.Command(bin, s.Args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("driver: start supervisor %s: %w", bin, err)
	}
	h, err := watch(cmd.Process.Pid, func() error {
		err := cmd.Wait() // we are the parent: reap it
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("supervisor exited: %w", ee) // errors.As-able: driver.go reads the code
		}
		if err != nil {
			return fmt.Errorf("supervisor wait: %w", err)
		}
		return errors.New("supervisor exited: status 0")
	})
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return h, nil
}

// Adopt watches a supervisor started by an earlier gateway. It fails with
// ErrGone when no such process exists, when pid now belongs to another
// user than this process's, or when its command line is not one want
// accepts (a pid read from a store is untrusted, and one reused by another
// program must never be signalled as a supervisor).
func Adopt(pid int, want func(argv []string) bool) (*Handle, error) {
	if pid <= 0 {
		return nil, ErrGone
	}
	dir := "/proc/" + strconv.Itoa(pid)
	cmdline, err := os.ReadFile(dir + "/cmdline")
	if err != nil || !want(strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")) {
		return nil, ErrGone
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || int(st.Uid) != os.Geteuid() {
		return nil, ErrGone
	}
	return watch(pid, func() error { return errors.New("supervisor exited (not our child; status unknown)") })
}

// ErrGone: the supervisor process does not exist.
var ErrGone = errors.New("supervisor process is gone")

func watch(pid int, wait func() error) (*Handle, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, ErrGone
		}
		return nil, fmt.Errorf("driver: pidfd_open %d: %w", pid, err)
	}
	h := &Handle{Pid: pid, pfd: pfd, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, -1)
			if err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		h.err = wait()
		_ = unix.Close(pfd)
	}()
	return h, nil
}

// Done is closed when the supervisor has exited.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Err says how it exited (valid after Done).
func (h *Handle) Err() error { return h.err }

// Signal sends sig to the supervisor's process group and to it.
func (h *Handle) Signal(sig syscall.Signal) error {
	select {
	case <-h.done:
		return nil
	default:
	}
	_ = unix.Kill(-h.Pid, sig)
	if err := unix.Kill(h.Pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("driver: signal %d: %w", h.Pid, err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL, and waits for exit
// (bounded by ctx).
func (h *Handle) Stop(ctx context.Context, grace time.Duration) error {
	if grace > 0 {
		_ = h.Signal(syscall.SIGTERM)
		select {
		case <-h.done:
			return nil
		case <-time.After(grace):
		case <-ctx.Done():
		}
	}
	if err := h.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("driver: supervisor %d did not exit: %w", h.Pid, ctx.Err())
	}
}
