package nsrun

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// runInit is pid 1 of the sandbox. It returns the process exit code.
func runInit() int {
	parent, err := fileConn(fdChannel)
	if err != nil {
		return exitNoChannel
	}
	unix.Close(fdExe)
	// It was exec'd as /proc/self/fd/4: give ps a better name than "4".
	_ = os.WriteFile("/proc/self/comm", []byte("stockade-init"), 0)
	// No signal from inside may stop init (SIGKILL from inside the pid
	// namespace never reaches it anyway). Caught and dropped, not ignored:
	// an ignored disposition would be inherited by the workload.
	signal.Notify(make(chan os.Signal, 1), unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM,
		unix.SIGPIPE, unix.SIGUSR1, unix.SIGUSR2)
	children := make(chan os.Signal, 1)
	signal.Notify(children, unix.SIGCHLD)

	started, fds, err := setUpInit(parent)
	if err == nil {
		err = send(parent, started, fds...)
	}
	closeFDs(fds)
	if err != nil {
		// Best effort: the parent may be gone already.
		_ = send(parent, message{Kind: msgFailed, Error: err.Error()})
		return exitFailed
	}
	go reap(parent, started.Pid, children)
	// Exit when the parent's end closes (or the channel breaks): the
	// kernel then kills every process in the pid namespace.
	for {
		_, fds, err := recv(parent)
		if err != nil {
			return 0
		}
		closeFDs(fds)
	}
}

// setUpInit reads the config, builds the sandbox and starts the workload.
// It returns the started message and the descriptors to pass with it.
func setUpInit(parent *net.UnixConn) (message, []int, error) {
	m, in, err := recv(parent)
	if err != nil {
		return message{}, nil, fmt.Errorf("init: read config: %w", err)
	}
	defer closeFDs(in)
	if m.Kind != msgConfig || m.Config == nil {
		return message{}, nil, fmt.Errorf("init: first message is %s, want config", m.Kind)
	}
	cfg := m.Config
	tree := -1
	if len(in) > 0 {
		tree = in[0]
	}
	fds, err := setUpNetwork()
	if err != nil {
		return message{}, nil, fmt.Errorf("init: network: %w", err)
	}
	warnings, err := setUpRoot(cfg, tree)
	if err == nil {
		err = unix.Sethostname([]byte(cfg.Hostname))
		if err != nil {
			err = fmt.Errorf("sethostname: %w", err)
		}
	}
	if err != nil {
		closeFDs(fds)
		return message{}, nil, fmt.Errorf("init: filesystem: %w", err)
	}
	pid, ready, err := startExecStage(cfg)
	if err != nil {
		closeFDs(fds)
		return message{}, nil, err
	}
	return message{
		Kind:        msgStarted,
		Pid:         pid,
		Warnings:    append(warnings, ready.Warnings...),
		LandlockABI: ready.LandlockABI,
	}, fds, nil
}

// startExecStage re-execs this binary as the exec stage, sends it the
// config and waits until it has exec'd the workload (its channel end is
// close-on-exec) or failed. It returns the workload's pid and the exec
// stage's ready message.
func startExecStage(cfg *stageConfig) (int, message, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, message{}, fmt.Errorf("exec stage: socketpair: %w", err)
	}
	conn, err := fileConn(pair[0])
	if err != nil {
		unix.Close(pair[1])
		return 0, message{}, fmt.Errorf("exec stage: %w", err)
	}
	defer conn.Close()
	child := os.NewFile(uintptr(pair[1]), "nsrun-exec")
	p, err := os.StartProcess("/proc/self/exe", []string{"stockade-nsrun-exec"}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{stageEnv + "=" + stageExec},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, child},
	})
	child.Close()
	if err != nil {
		return 0, message{}, fmt.Errorf("exec stage: start: %w", err)
	}
	pid := p.Pid
	// The reaper collects it; the os.Process must never Wait.
	_ = p.Release()
	if err := send(conn, message{Kind: msgConfig, Config: cfg}); err != nil {
		return 0, message{}, fmt.Errorf("exec stage: %w", err)
	}
	ready, fds, err := recv(conn)
	closeFDs(fds)
	if err == nil && ready.Kind != msgReady {
		err = stageError(ready)
	}
	if err != nil {
		return 0, message{}, fmt.Errorf("exec stage: %w", err)
	}
	// End of file: execve succeeded. A message: it failed.
	last, fds, err := recv(conn)
	closeFDs(fds)
	if !errors.Is(err, io.EOF) {
		if err == nil {
			err = stageError(last)
		}
		return 0, message{}, fmt.Errorf("exec stage: %w", err)
	}
	return pid, ready, nil
}

// stageError turns an unexpected or failed message into an error.
func stageError(m message) error {
	if m.Kind == msgFailed {
		return errors.New(m.Error)
	}
	return fmt.Errorf("unexpected %s message", m.Kind)
}

// reap collects every child of init (the workload and every orphan that
// was reparented to pid 1) and reports the workload's exit.
func reap(parent *net.UnixConn, workload int, children <-chan os.Signal) {
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
			if pid == workload {
				st := exitStatusOf(ws)
				// If the parent is gone, init is about to exit anyway.
				_ = send(parent, message{Kind: msgExited, Status: &st})
			}
		}
		<-children
	}
}
