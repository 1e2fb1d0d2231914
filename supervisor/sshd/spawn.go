package sshd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Spawner starts the processes of SSH sessions. The supervisor's
// implementation runs them inside the sandbox (namespaces, Landlock);
// HostSpawner runs them on the host.
type Spawner interface {
	// Spawn starts req.Argv. It does not take ownership of req's files: the
	// caller closes its copies after Spawn returns. ctx bounds the start
	// only; the process's lifetime is the session's (Proc.Signal ends it).
	Spawn(ctx context.Context, req SpawnRequest) (Proc, error)
}

// SpawnRequest describes one process to start.
type SpawnRequest struct {
	Argv    []string // Argv[0] is the program's path
	Env     []string // complete environment, KEY=VALUE
	Workdir string   // "" = the spawner's default
	// Stdin, Stdout, Stderr become fds 0, 1, 2 (nil = /dev/null).
	Stdin, Stdout, Stderr *os.File
	// Setsid makes the process a session and process-group leader;
	// Setctty (needs Setsid) makes its Stdin its controlling terminal.
	Setsid, Setctty bool
}

// Proc is a started process.
type Proc interface {
	// Wait waits for the process to exit. code is the exit status when
	// signal is ""; signal is the SSH name of the signal that killed it
	// ("TERM", "KILL", ...). err is set only when the status is unknown.
	Wait() (code int, signal string, err error)
	// Signal delivers sig to the process, or to its process group when it
	// was started with Setsid. After Wait has returned it does nothing.
	Signal(sig syscall.Signal) error
}

// HostSpawner starts processes on the host with os/exec, as the
// supervisor's user. It is NOT confinement: no namespaces, no Landlock, no
// policy. Use it in tests and only as an explicit fallback.
type HostSpawner struct{}

// Spawn implements Spawner.
func (HostSpawner) Spawn(_ context.Context, req SpawnRequest) (Proc, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("sshd: host spawn: empty argv")
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env, cmd.Dir = req.Env, req.Workdir
	// Assigning a nil *os.File would make a non-nil io.Reader.
	if req.Stdin != nil {
		cmd.Stdin = req.Stdin
	}
	if req.Stdout != nil {
		cmd.Stdout = req.Stdout
	}
	if req.Stderr != nil {
		cmd.Stderr = req.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: req.Setsid, Setctty: req.Setctty, Ctty: 0}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sshd: host spawn %s: %w", req.Argv[0], err)
	}
	return &hostProc{cmd: cmd, group: req.Setsid}, nil
}

type hostProc struct {
	cmd   *exec.Cmd
	group bool

	mu     sync.Mutex
	exited bool
}

func (p *hostProc) Wait() (int, string, error) {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, "", fmt.Errorf("sshd: wait %s: %w", p.cmd.Path, err)
	}
	return exitOf(p.cmd.ProcessState.Sys().(syscall.WaitStatus))
}

func (p *hostProc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	pid := p.cmd.Process.Pid
	if p.group {
		pid = -pid
	}
	if err := unix.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("sshd: signal %d: %w", pid, err)
	}
	return nil
}

// exitOf converts a wait status into Proc.Wait's results.
func exitOf(ws syscall.WaitStatus) (int, string, error) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), SignalName(ws.Signal()), nil
	}
	return ws.ExitStatus(), "", nil
}

// SignalName returns the SSH name of sig (RFC 4254 6.10: without "SIG").
func SignalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	return fmt.Sprintf("%d", int(sig))
}

// ParseSignal returns the signal an SSH signal name ("TERM") denotes, or 0.
func ParseSignal(name string) syscall.Signal {
	return unix.SignalNum("SIG" + name)
}
