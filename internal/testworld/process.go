package testworld

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Spec is a process to start.
type Spec struct {
	// Bin is the program: the stockade binary the caller built.
	Bin string
	// Args are its arguments; StartProcess appends --ready-file PATH, so
	// they must not end in a `--` list.
	Args []string
	// Dir holds the ready file (Name.ready) and the log (Name.log, stdout
	// and stderr, appended across restarts). The process's user must be
	// able to create files in it.
	Dir string
	// Name names the files and the messages (default: Bin's base name).
	Name string
	// UID runs the process as this user and group id (the caller must be
	// root); 0: as the caller.
	UID int
	// Env is added to the caller's environment.
	Env []string
	// Timeout bounds the wait for the ready file (default 30 s).
	Timeout time.Duration
	// RetryInUse is how long to keep retrying a start that failed because
	// an address was in use: a restart on a fixed port another process's
	// outgoing connection holds for a moment. 0: no retry.
	RetryInUse time.Duration
}

// Addrs is the ready file: what the process serves. A gateway fills API,
// Relay and StateDir, a boundary Proxy and DNS; Metrics is set when the
// process serves metrics.
type Addrs struct {
	API      string `json:"api"`
	Relay    string `json:"relay"`
	StateDir string `json:"state_dir"`
	Proxy    string `json:"proxy"`
	DNS      string `json:"dns"`
	Metrics  string `json:"metrics"`
	PID      int    `json:"pid"`
}

// Process is a started process that became ready.
type Process struct {
	// Cmd is the running command. Use Cmd.Process for its pid and
	// signals; Cmd.ProcessState is set only once Done is closed.
	Cmd *exec.Cmd
	// Addrs is what it wrote into its ready file.
	Addrs Addrs
	// ReadyFile is the ready file's path.
	ReadyFile string
	// Log is this start's output.
	Log  *Log
	name string
	done chan struct{}
	err  error // Cmd.Wait's result; set before done is closed
}

// Log is the output of one start: the part of the (appended) log file
// written since that start.
type Log struct {
	path string
	from int64
}

// Path is the log file (earlier starts' output included).
func (l *Log) Path() string { return l.path }

// String is the output of this start so far.
func (l *Log) String() string {
	f, err := os.Open(l.path)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", l.path, err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := f.Seek(l.from, 0); err == nil {
		_, _ = b.ReadFrom(f)
	}
	return b.String()
}

// Tail is the last n lines of this start's output ("(no output)" when
// there is none).
func (l *Log) Tail(n int) string {
	out := strings.TrimRight(l.String(), "\n")
	if out == "" {
		return "(no output)"
	}
	lines := strings.Split(out, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// tailLines is how much of the log an error carries.
const tailLines = 30

// StartProcess starts s and waits until it has written its ready file. It
// fails when the process exits first (the error wraps the exit error, and
// syscall.EADDRINUSE when its log says an address was in use), when it is
// not ready within s.Timeout, or when ctx ends; the process is then gone.
func StartProcess(ctx context.Context, s Spec) (*Process, error) {
	if s.Name == "" {
		s.Name = filepath.Base(s.Bin)
	}
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	retryUntil := time.Now().Add(s.RetryInUse)
	for {
		p, err := startOnce(ctx, s)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(retryUntil) {
			return p, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testworld: %s: %w (retrying: %w)", s.Name, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func startOnce(ctx context.Context, s Spec) (*Process, error) {
	ready := filepath.Join(s.Dir, s.Name+".ready")
	// A file a killed earlier process left is not this one's readiness.
	if err := os.Remove(ready); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("testworld: %s: remove the stale ready file: %w", s.Name, err)
	}
	logPath := filepath.Join(s.Dir, s.Name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testworld: %s: log file: %w (is Spec.Dir a writable directory?)", s.Name, err)
	}
	defer lf.Close() // the child has its own copy
	st, err := lf.Stat()
	if err != nil {
		return nil, fmt.Errorf("testworld: %s: log file: %w", s.Name, err)
	}
	cmd := exec.Command(s.Bin, append(slices.Clone(s.Args), "--ready-file", ready)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	if s.UID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.UID)}}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testworld: start %s: %w", s.Name, err)
	}
	p := &Process{Cmd: cmd, ReadyFile: ready, Log: &Log{path: logPath, from: st.Size()}, name: s.Name, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, s.Timeout); err != nil {
		_ = p.Kill()
		return nil, err
	}
	return p, nil
}

// waitReady polls for the ready file until the deadline.
func (p *Process) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(p.ReadyFile); err == nil {
			// The file is renamed into place: it is whole.
			if err := json.Unmarshal(b, &p.Addrs); err != nil {
				return fmt.Errorf("testworld: %s: ready file %s: %w (content %q)", p.name, p.ReadyFile, err, b)
			}
			if p.Addrs.PID != p.Cmd.Process.Pid {
				return fmt.Errorf("testworld: %s: ready file %s names pid %d, not %d: another process writes the same file (give each its own Spec.Dir or Name)",
					p.name, p.ReadyFile, p.Addrs.PID, p.Cmd.Process.Pid)
			}
			return nil
		}
		select {
		case <-p.done:
			cause := p.err
			tail := p.Log.Tail(tailLines)
			if strings.Contains(tail, "address already in use") {
				cause = fmt.Errorf("%w: %w", syscall.EADDRINUSE, p.err)
			}
			return fmt.Errorf("testworld: %s exited before it was ready: %w; its log %s ends:\n%s", p.name, cause, p.Log.Path(), tail)
		case <-ctx.Done():
			return fmt.Errorf("testworld: %s: waiting for %s: %w", p.name, p.ReadyFile, ctx.Err())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testworld: %s not ready within %s (no %s; killed it); its log %s ends:\n%s",
				p.name, timeout, p.ReadyFile, p.Log.Path(), p.Log.Tail(tailLines))
		}
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err waits until the process has exited and returns its exit error (nil:
// status 0).
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs. It returns the
// exit error (nil: a clean exit), or an error saying the process had to be
// killed. Stopping a process that has exited returns its exit error.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if p.wait(grace) {
		return p.err
	}
	if err := p.Kill(); err != nil {
		return err
	}
	return fmt.Errorf("testworld: %s did not stop within %s of SIGTERM; killed it", p.name, grace)
}

// Kill SIGKILLs the process and waits (10 s at most) until it is gone.
func (p *Process) Kill() error {
	_ = p.Cmd.Process.Kill()
	if !p.wait(10 * time.Second) {
		return fmt.Errorf("testworld: %s (pid %d) still runs 10 s after SIGKILL (stuck in the kernel?)", p.name, p.Cmd.Process.Pid)
	}
	return nil
}

// wait reports whether the process exits within d, polling the deadline.
func (p *Process) wait(d time.Duration) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return true
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
