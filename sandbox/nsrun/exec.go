package nsrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
)

// ErrWorkloadExited: Exec was called after the workload had exited; the
// sandbox is ending.
var ErrWorkloadExited = errors.New("nsrun: the workload has exited")

// ExecSpec describes a process to run inside a running sandbox.
type ExecSpec struct {
	// Argv is the command; Argv[0] without a slash is looked up in Env's
	// PATH inside the sandbox.
	Argv []string
	// Env is the environment, with the same rules as Spec.Env: the proxy
	// variables are forced, PATH and HOME (Workdir) get defaults.
	Env []string
	// Workdir is the working directory inside (default /sandbox). It does
	// not widen the filesystem policy: IncludeWorkdir meant the workload's.
	Workdir string
	// Stdin, Stdout and Stderr become the process's descriptors 0, 1 and 2
	// (nil: /dev/null): pipe ends or a pty's slave, for example. Exec
	// passes duplicates to init; the caller keeps and closes its own (close
	// the write end of a stdout pipe after Exec returns to see EOF).
	Stdin, Stdout, Stderr *os.File
	// Setsid puts the process in a new session; Setctty (which needs
	// Setsid and Stdin) also makes Stdin, a terminal, its controlling
	// terminal.
	Setsid, Setctty bool
}

// request validates e, fills defaults and returns what init gets;
// viaProxy is the sandbox's Spec.ProxyLoopback.
func (e ExecSpec) request(viaProxy []string) (*execRequest, error) {
	if len(e.Argv) == 0 || e.Argv[0] == "" {
		return nil, errors.New("empty Argv")
	}
	wd := orDefault(e.Workdir, DefaultWorkdir)
	if !filepath.IsAbs(wd) {
		return nil, fmt.Errorf("workdir %q is not an absolute path", wd)
	}
	if e.Setctty && (!e.Setsid || e.Stdin == nil) {
		return nil, errors.New("a controlling terminal (Setctty) needs Setsid and a terminal as Stdin")
	}
	return &execRequest{Argv: e.Argv, Env: workloadEnv(e.Env, wd, viaProxy), Workdir: wd, Setsid: e.Setsid, Setctty: e.Setctty}, nil
}

// Process is a process started by Exec. Its methods are safe for
// concurrent use.
type Process struct {
	s       *Sandbox
	id      uint64
	pid     int
	started chan error // init's answer to the request: nil once exec'd

	// Guarded by s.procMu.
	running   bool // the start was reported
	abandoned bool // Exec gave up waiting: kill it once it starts

	done     chan struct{}
	doneOnce sync.Once
	status   ExitStatus
	err      error
}

// Exec runs a process inside the sandbox. Init starts it through the same
// exec stage as the workload, so it gets exactly the workload's
// confinement: the sandbox's namespaces and root, RunAsUser/RunAsGroup,
// the trimmed capabilities, no_new_privs, the Landlock domain of
// Spec.Filesystem and no descriptor but its three. Exec returns once the
// process has been exec'd; a failure (a missing binary, a bad descriptor)
// is an error for this caller only, naming the cause. If ctx ends first,
// Exec returns its error and the process, should it start after all, is
// killed.
//
// Exec'd processes live until they exit or the sandbox ends (Close, Kill,
// init's death): the supervisor closes the sandbox when the workload
// exits, and they die with it; their Wait then returns ErrInitExited.
// Exec after the workload has exited returns ErrWorkloadExited.
func (s *Sandbox) Exec(ctx context.Context, e ExecSpec) (*Process, error) {
	req, err := e.request(s.viaProxy)
	if err != nil {
		return nil, fmt.Errorf("nsrun: exec: %w", err)
	}
	what := "nsrun: exec " + req.Argv[0]
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	select {
	case <-s.exited:
		if _, err := s.Wait(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return nil, fmt.Errorf("%s: %w", what, ErrWorkloadExited)
	default:
	}
	stdio := [3]*os.File{e.Stdin, e.Stdout, e.Stderr}
	for i, f := range stdio {
		if f != nil {
			continue
		}
		null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		defer null.Close()
		stdio[i] = null
	}
	fds := make([]int, 3)
	for i, f := range stdio {
		// Like os/exec: Fd puts the descriptor in blocking mode, which
		// the process expects.
		fds[i] = int(f.Fd())
	}
	p := &Process{s: s, started: make(chan error, 1), done: make(chan struct{})}
	if err := s.addProc(p); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	err = send(s.conn, message{Kind: msgExec, ID: p.id, Exec: req}, fds...)
	runtime.KeepAlive(stdio) // no finalizer closes them before they are sent
	if err != nil {
		s.removeProc(p.id)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	select {
	case err := <-p.started:
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return p, nil
	case <-ctx.Done():
		s.abandon(p)
		return nil, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// Pid is the process's host pid, translated by the kernel from the one
// init reported; 0 in the rare case it had exited and been reaped before
// init reported its start.
func (p *Process) Pid() int { return p.pid }

// Done is closed when Wait would return.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait returns the process's exit status, as init reaped it, or
// ErrInitExited if the sandbox ended first.
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Signal asks init to send sig to the process (init holds a pidfd for it,
// so a recycled pid is never hit). It returns os.ErrProcessDone once the
// exit has been reported; a signal racing with the exit is dropped.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if err := send(p.s.conn, message{Kind: msgSignal, ID: p.id, Signal: sig}); err != nil {
		return fmt.Errorf("nsrun: signal process %d: %w", p.id, err)
	}
	return nil
}

func (p *Process) finish(st ExitStatus, err error) {
	p.doneOnce.Do(func() {
		p.status, p.err = st, err
		close(p.done)
	})
}

// addProc gives p an ID and records it, unless init's channel has ended.
func (s *Sandbox) addProc(p *Process) error {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if s.chanDone {
		return ErrInitExited
	}
	s.nextID++
	p.id = s.nextID
	s.procs[p.id] = p
	return nil
}

func (s *Sandbox) removeProc(id uint64) *Process {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	p := s.procs[id]
	delete(s.procs, id)
	return p
}

// abandon: Exec stopped waiting for p's start. If it started meanwhile it
// is killed now, else as soon as it does.
func (s *Sandbox) abandon(p *Process) {
	s.procMu.Lock()
	running := p.running
	p.abandoned = !running
	s.procMu.Unlock()
	if running {
		_ = p.Signal(syscall.SIGKILL)
	}
}

// procStarted records the start init reported and wakes Exec.
func (s *Sandbox) procStarted(m message) {
	pid := s.hostPidOf(m)
	s.procMu.Lock()
	p := s.procs[m.ID]
	abandoned := false
	if p != nil {
		p.pid, p.running = pid, true
		abandoned = p.abandoned
	}
	s.procMu.Unlock()
	switch {
	case p == nil:
	case abandoned:
		// Not from the read loop: a send must never hold it up.
		go func() { _ = p.Signal(syscall.SIGKILL) }()
	default:
		p.started <- nil
	}
}

// procFailed reports to Exec why init could not start the process.
func (s *Sandbox) procFailed(id uint64, err error) {
	if p := s.removeProc(id); p != nil {
		p.started <- err
	}
}

func (s *Sandbox) procExited(id uint64, st ExitStatus) {
	if p := s.removeProc(id); p != nil {
		p.finish(st, nil)
	}
}

// endProcs: init's channel has ended; every pending Exec fails and every
// Wait returns ErrInitExited.
func (s *Sandbox) endProcs() {
	s.procMu.Lock()
	procs := s.procs
	s.procs, s.chanDone = map[uint64]*Process{}, true
	var pending []*Process
	for _, p := range procs {
		if !p.running {
			pending = append(pending, p)
		}
	}
	s.procMu.Unlock()
	for _, p := range pending {
		p.started <- ErrInitExited
	}
	for _, p := range procs {
		p.finish(ExitStatus{}, ErrInitExited)
	}
}
