package nsrun

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/clock"
)

// runInit is pid 1 of the sandbox. It returns the process exit code.
func runInit() int {
	parent, err := fileConn(fdChannel)
	if err != nil {
		return exitNoChannel
	}
	unix.Close(fdExe)
	// The output pipe (when the config asks for one) is init's alone.
	unix.CloseOnExec(fdOutput)
	// It was exec'd as /proc/self/fd/4: give ps a better name than "4".
	_ = os.WriteFile("/proc/self/comm", []byte("stockade-init"), 0)
	// No signal from inside may stop init (SIGKILL from inside the pid
	// namespace never reaches it anyway). Caught and dropped, not ignored:
	// an ignored disposition would be inherited by the workload.
	signal.Notify(make(chan os.Signal, 1), unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM,
		unix.SIGPIPE, unix.SIGUSR1, unix.SIGUSR2)
	children := make(chan os.Signal, 1)
	signal.Notify(children, unix.SIGCHLD)

	st := &initState{parent: parent, byPid: map[int]*child{}, byID: map[uint64]*child{}}
	if err := st.setUp(); err != nil {
		// Best effort: the parent may be gone already.
		_ = send(parent, failure(0, err))
		return exitFailed
	}
	go st.reap(children)
	// Serve the parent's requests; exit when its end closes (or the
	// channel breaks): the kernel then kills every process in the pid
	// namespace.
	for {
		m, fds, err := recv(parent)
		if errors.Is(err, errBadMessage) {
			continue
		}
		if err != nil {
			st.end()
			return 0
		}
		switch m.Kind {
		case msgExec:
			go st.exec(m, fds)
		case msgSignal:
			closeFDs(fds)
			st.signal(m.ID, m.Signal)
		default:
			closeFDs(fds)
		}
	}
}

// initState is init's record of the processes it started: the workload
// (ID 0) and every exec'd process, by pid for the reaper and by ID for
// signals.
type initState struct {
	parent *net.UnixConn
	cfg    *stageConfig // the workload's; an exec'd process differs only in argv, env and workdir
	pump   *pump        // the workload's output, with cfg.Output

	mu    sync.Mutex
	byPid map[int]*child
	byID  map[uint64]*child
}

// child is a process init started through the exec stage.
type child struct {
	id   uint64
	pid  int
	proc *os.Process // holds a pidfd: signals never reach a recycled pid
	// running: its start has been reported, so its exit may be.
	running bool
	// status: reaped before its start was reported.
	status *ExitStatus
}

// setUp reads the config, builds the sandbox, starts the workload and
// reports it started with the boundary's descriptors (four, or three when
// the parent made the proxy listener).
func (st *initState) setUp() error {
	m, in, err := recv(st.parent)
	if err != nil {
		return fmt.Errorf("init: read config: %w", err)
	}
	defer closeFDs(in)
	if m.Kind != msgConfig || m.Config == nil {
		return fmt.Errorf("init: first message is %s, want config", m.Kind)
	}
	st.cfg = m.Config
	limitWarnings := setInotifyLimits(st.cfg.Inotify)
	tree := -1
	if len(in) > 0 {
		tree = in[0]
	}
	fds, err := setUpNetwork(st.cfg.ParentProxy)
	if err != nil {
		return fmt.Errorf("init: network: %w", err)
	}
	defer closeFDs(fds)
	warnings, err := setUpRoot(st.cfg, tree)
	if err == nil {
		err = unix.Sethostname([]byte(st.cfg.Hostname))
		if err != nil {
			err = fmt.Errorf("sethostname: %w", err)
		}
	}
	if err != nil {
		return fmt.Errorf("init: filesystem: %w", err)
	}
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if st.cfg.Output != nil {
		p, ends, err := startPump(*st.cfg.Output, fdOutput, clock.System{})
		if err != nil {
			return fmt.Errorf("init: output: %w", err)
		}
		st.pump = p
		stdio[1], stdio[2] = ends[0], ends[1]
		// Once the workload has them, only its processes hold the write
		// ends: the pump reads until they are gone.
		defer ends[0].Close()
		defer ends[1].Close()
	}
	c, ready, err := st.startExecStage(0, st.cfg, stdio, nil)
	if err != nil {
		return err
	}
	return st.reportStarted(c, message{
		Kind:        msgStarted,
		Pid:         c.pid,
		Warnings:    append(append(limitWarnings, warnings...), ready.Warnings...),
		LandlockABI: ready.LandlockABI,
	}, fds...)
}

// end is init's last act, once the parent's end of the channel has
// closed: with a pump, every other process of the sandbox is killed (the
// kernel would as init exits) so that the workload's pipes end, and the
// pump passes on what they held, bounded by pumpGrace twice.
func (st *initState) end() {
	if st.pump == nil {
		return
	}
	_ = unix.Kill(-1, unix.SIGKILL) // inside its pid namespace: never init itself
	st.pump.end(pumpGrace)
}

// exec starts the process of a msgExec request and reports its start, or
// reports to the parent why it could not; either way only that request is
// affected.
func (st *initState) exec(m message, fds []int) {
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "exec-stdio")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	err := func() error {
		if m.Exec == nil || len(m.Exec.Argv) == 0 || len(files) != 3 {
			return fmt.Errorf("malformed exec request (%d descriptors)", len(files))
		}
		cfg := *st.cfg
		cfg.Argv, cfg.Env, cfg.Workdir = m.Exec.Argv, m.Exec.Env, m.Exec.Workdir
		attr := &syscall.SysProcAttr{Setsid: m.Exec.Setsid, Setctty: m.Exec.Setctty, Ctty: 0}
		c, _, err := st.startExecStage(m.ID, &cfg, files, attr)
		if err != nil {
			return err
		}
		return st.reportStarted(c, message{Kind: msgExecStarted, ID: m.ID, Pid: c.pid})
	}()
	if err != nil {
		_ = send(st.parent, failure(m.ID, err))
	}
}

// startExecStage re-execs this binary as the exec stage with stdio as its
// descriptors 0-2, sends it cfg and waits until it has exec'd cfg.Argv
// (its channel end is close-on-exec) or failed. It returns the child,
// recorded under id, and the exec stage's ready message.
func (st *initState) startExecStage(id uint64, cfg *stageConfig, stdio []*os.File, attr *syscall.SysProcAttr) (*child, message, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, message{}, fmt.Errorf("exec stage: socketpair: %w", err)
	}
	conn, err := fileConn(pair[0])
	if err != nil {
		unix.Close(pair[1])
		return nil, message{}, fmt.Errorf("exec stage: %w", err)
	}
	defer conn.Close()
	chEnd := os.NewFile(uintptr(pair[1]), "nsrun-exec")
	// Recorded before the reaper may look it up: it takes st.mu after
	// reaping.
	st.mu.Lock()
	p, err := os.StartProcess("/proc/self/exe", []string{"stockade-nsrun-exec"}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{stageEnv + "=" + stageExec},
		Files: append(stdio[:3:3], chEnd),
		Sys:   attr,
	})
	var c *child
	if err == nil {
		c = &child{id: id, pid: p.Pid, proc: p}
		st.byPid[c.pid], st.byID[id] = c, c
	}
	st.mu.Unlock()
	chEnd.Close()
	if err != nil {
		return nil, message{}, fmt.Errorf("exec stage: start: %w", err)
	}
	ready, err := execHandshake(conn, cfg)
	if err != nil {
		// It has not exec'd: nothing of it may run on.
		_ = p.Kill()
		st.mu.Lock()
		st.drop(c)
		st.mu.Unlock()
		return nil, message{}, fmt.Errorf("exec stage: %w", err)
	}
	return c, ready, nil
}

// execHandshake sends the exec stage its config and returns its ready
// message once the channel's end of file says execve succeeded.
func execHandshake(conn *net.UnixConn, cfg *stageConfig) (message, error) {
	if err := send(conn, message{Kind: msgConfig, Config: cfg}); err != nil {
		return message{}, err
	}
	ready, fds, err := recv(conn)
	closeFDs(fds)
	if err == nil && ready.Kind != msgReady {
		err = stageError(ready)
	}
	if err != nil {
		return message{}, err
	}
	// End of file: execve succeeded. A message: it failed.
	last, fds, err := recv(conn)
	closeFDs(fds)
	if !errors.Is(err, io.EOF) {
		if err == nil {
			err = stageError(last)
		}
		return message{}, err
	}
	return ready, nil
}

// reportStarted sends m (with c's pid as SCM_CREDENTIALS, for the parent's
// numbering), after which c's exit may be reported; if the reaper got it
// first, that is at once.
func (st *initState) reportStarted(c *child, m message, fds ...int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := sendAs(st.parent, m, c.pid, fds...); err != nil {
		_ = c.proc.Kill()
		st.drop(c)
		return err
	}
	c.running = true
	if c.status != nil {
		st.reportExit(c, *c.status)
	}
	return nil
}

// reportExit sends c's exit status and forgets c. st.mu is held.
func (st *initState) reportExit(c *child, status ExitStatus) {
	st.drop(c)
	// If the parent is gone, init is about to exit anyway.
	_ = send(st.parent, message{Kind: msgExited, ID: c.id, Status: &status})
}

// drop forgets c. st.mu is held.
func (st *initState) drop(c *child) {
	delete(st.byPid, c.pid)
	delete(st.byID, c.id)
	_ = c.proc.Release()
}

// signal delivers sig to process id, if it still runs.
func (st *initState) signal(id uint64, sig syscall.Signal) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if c := st.byID[id]; c != nil && c.running {
		_ = c.proc.Signal(sig)
	}
}

// stageError turns an unexpected or failed message into an error.
func stageError(m message) error {
	if m.Kind == msgFailed && m.Permanent {
		return permanentText(m.Error)
	}
	if m.Kind == msgFailed {
		return errors.New(m.Error)
	}
	return fmt.Errorf("unexpected %s message", m.Kind)
}

// reap collects every child of init (the workload, exec'd processes and
// every orphan that was reparented to pid 1) and reports the exits of the
// processes it started.
func (st *initState) reap(children <-chan os.Signal) {
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			st.reaped(pid, exitStatusOf(ws))
		}
		<-children
	}
}

func (st *initState) reaped(pid int, status ExitStatus) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch c := st.byPid[pid]; {
	case c == nil: // an orphan, or an exec stage that failed
	case c.running:
		st.reportExit(c, status)
	default:
		c.status = &status
	}
}
