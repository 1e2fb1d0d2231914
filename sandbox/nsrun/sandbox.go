package nsrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// closeGrace is how long Close waits for init to exit after closing its
// channel before it kills init outright.
const closeGrace = 5 * time.Second

// ErrInitExited: the sandbox's init ended before the workload's exit was
// reported (it was killed, or crashed).
var ErrInitExited = errors.New("nsrun: sandbox init exited before the workload")

// errInitGone: init closed its channel during the start.
var errInitGone = errors.New("init closed its channel before reporting")

// ExitStatus is how the workload ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when a signal killed the workload.
	Code int `json:"code"`
	// Signal is the killing signal (0 for a normal exit).
	Signal syscall.Signal `json:"signal,omitempty"`
}

// Success reports a zero exit code.
func (e ExitStatus) Success() bool { return e.Code == 0 && e.Signal == 0 }

// String is "exit 3" or "signal killed".
func (e ExitStatus) String() string {
	if e.Signal != 0 {
		return "signal " + e.Signal.String()
	}
	return fmt.Sprintf("exit %d", e.Code)
}

func exitStatusOf(ws unix.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: -1, Signal: syscall.Signal(ws.Signal())}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// Sandbox is a running sandbox, seen from the parent. Its methods are safe
// for concurrent use.
type Sandbox struct {
	log         zerolog.Logger
	cmd         *exec.Cmd
	conn        *net.UnixConn
	proxy       net.Listener
	dnsUDP      net.PacketConn
	dnsTCP      net.Listener
	diag        *os.File
	pidNS       string // readlink of /proc/<init>/ns/pid
	workloadPid int
	warnings    []string
	landlockABI int
	viaProxy    []string // Spec.ProxyLoopback, for Exec's environment

	exited     chan struct{} // closed once status or waitErr is set
	exitOnce   sync.Once
	status     ExitStatus
	waitErr    error
	initDone   chan struct{} // closed when init has been reaped
	outputDone chan struct{} // closed when init's output (Spec.Output) has been read to its end
	closeOnce  sync.Once
	closeErr   error
	listenerMu sync.Mutex

	procMu   sync.Mutex
	nextID   uint64              // of the last Exec
	procs    map[uint64]*Process // exec'd processes not yet ended
	chanDone bool                // init's channel has ended: no more Exec
}

// Start creates the sandbox and starts the workload. It returns once the
// workload has been exec'd, with the boundary's descriptors received. ctx
// bounds the start only; the sandbox lives until Close or Kill.
func Start(ctx context.Context, spec Spec) (*Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nsrun: start: %w", err)
	}
	cfg, ids, err := spec.prepare()
	if err != nil {
		return nil, fmt.Errorf("nsrun: %w", err)
	}
	exe, err := os.Open(orDefault(spec.Executable, "/proc/self/exe"))
	if err != nil {
		return nil, fmt.Errorf("nsrun: executable: %w", err)
	}
	defer exe.Close()
	var trees []int
	if ids.root {
		tree, err := workspaceTree(spec.Workspace, ids)
		if err != nil {
			return nil, err
		}
		defer unix.Close(tree)
		trees = []int{tree}
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nsrun: socketpair: %w", err)
	}
	// Init's reports name processes by SCM_CREDENTIALS, which the kernel
	// translates to host pids for a receiver that asks.
	if err := unix.SetsockoptInt(pair[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		closeFDs(pair[:])
		return nil, fmt.Errorf("nsrun: socketpair: SO_PASSCRED: %w", err)
	}
	conn, err := fileConn(pair[0])
	if err != nil {
		unix.Close(pair[1])
		return nil, fmt.Errorf("nsrun: %w", err)
	}
	child := os.NewFile(uintptr(pair[1]), "nsrun-init")
	extra := []*os.File{child, exe} // fdChannel, fdExe
	var outR, outW *os.File
	if spec.Output != nil {
		if outR, outW, err = os.Pipe(); err != nil {
			child.Close()
			conn.Close()
			return nil, fmt.Errorf("nsrun: output pipe: %w", err)
		}
		extra = append(extra, outW) // fdOutput
	}
	cmd := &exec.Cmd{
		// The child execs the binary through the descriptor: as a mapped
		// uid it may not be able to walk to its path (e.g. a 0700 dir).
		Path:        procFD(fdExe),
		Args:        []string{"stockade-nsrun-init"},
		Env:         []string{stageEnv + "=" + stageInit},
		Dir:         "/",
		Stdin:       spec.Stdin,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		ExtraFiles:  extra,
		SysProcAttr: sysProcAttr(ids),
	}
	if ids.root {
		err = startAsOwner(cmd, ids.base, ids.base)
	} else {
		err = cmd.Start()
	}
	child.Close()
	if outW != nil {
		outW.Close() // init's alone now: its end of file is init's exit
	}
	if err != nil {
		conn.Close()
		if outR != nil {
			outR.Close()
		}
		return nil, fmt.Errorf("nsrun: start init: %w%s", err, usernsHint(err))
	}
	s := &Sandbox{
		log:        spec.Logger.With().Str("component", "nsrun").Int("init_pid", cmd.Process.Pid).Logger(),
		cmd:        cmd,
		conn:       conn,
		exited:     make(chan struct{}),
		initDone:   make(chan struct{}),
		outputDone: make(chan struct{}),
		procs:      map[uint64]*Process{},
		viaProxy:   spec.ProxyLoopback,
	}
	if outR != nil {
		go s.readOutput(outR, spec.Output.Sink, s.log)
	} else {
		close(s.outputDone)
	}
	go func() {
		err := cmd.Wait()
		s.log.Debug().Err(err).Msg("init reaped")
		close(s.initDone)
	}()
	if spec.Cgroup != nil {
		// init waits for its config before it starts anything.
		if err := spec.Cgroup(cmd.Process.Pid); err != nil {
			_ = s.Kill()
			return nil, fmt.Errorf("nsrun: cgroup: %w", err)
		}
	}
	if ids.root {
		// Before the config: init starts nothing before it, so the
		// listener is there before the workload runs.
		if s.proxy, err = proxyListenerIn(cmd.Process.Pid); err != nil {
			if exit := s.initExit(); exit != "" {
				// Init died first (its namespace went with it): say
				// so, as the handshake would.
				err = fmt.Errorf("%w%s", errInitGone, exit)
			}
			_ = s.Kill()
			return nil, fmt.Errorf("nsrun: start: %w", err)
		}
		cfg.ParentProxy = true
	}
	if err := s.handshake(ctx, cfg, trees); err != nil {
		_ = s.Kill()
		return nil, err
	}
	go s.readLoop()
	s.log.Debug().Int("workload_pid", s.workloadPid).Strs("warnings", s.warnings).Int("landlock_abi", s.landlockABI).Msg("sandbox started")
	return s, nil
}

// workspaceTree (root only) makes the workspace owned by the sandbox user
// and returns a detached recursive clone of it for init to mount: init, as
// a mapped uid, may not be allowed to walk to the path.
func workspaceTree(dir string, ids idMapping) (int, error) {
	if err := os.Chown(dir, int(ids.hostUID), int(ids.hostGID)); err != nil {
		return -1, fmt.Errorf("nsrun: workspace: %w", err)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return -1, fmt.Errorf("nsrun: workspace %s: open_tree: %w", dir, err)
	}
	return tree, nil
}

// sysProcAttr returns the namespaces and id mappings of the init stage.
func sysProcAttr(ids idMapping) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWNS |
			unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
		// Out of the caller's session: no terminal signals reach init.
		Setsid: true,
	}
	if ids.root {
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ids.base), Size: int(ids.count)}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(ids.base), Size: int(ids.count)}}
		a.GidMappingsEnableSetgroups = true
		// Root inside; setgroups([]) drops the caller's groups.
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
		return a
	}
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(ids.insideUID), HostID: ids.callerUID, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(ids.insideGID), HostID: ids.callerGID, Size: 1}}
	a.Credential = &syscall.Credential{Uid: ids.insideUID, Gid: ids.insideGID, NoSetGroups: true}
	if ids.needAmbientCaps {
		// Init is not uid 0 inside, yet must mount, configure lo, bind
		// port 53 and set its namespace's inotify limits, and the exec
		// stage must trim the bounding set; the exec stage clears these
		// before the workload runs.
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_NET_ADMIN, unix.CAP_NET_BIND_SERVICE, unix.CAP_SETPCAP, unix.CAP_SYS_RESOURCE}
	}
	return a
}

// handshake sends the config and waits for init's started message.
func (s *Sandbox) handshake(ctx context.Context, cfg *stageConfig, trees []int) error {
	if err := send(s.conn, message{Kind: msgConfig, Config: cfg}, trees...); err != nil {
		if errors.Is(err, unix.EPIPE) {
			err = errInitGone
		}
		return fmt.Errorf("nsrun: start: %w%s", err, s.initExit())
	}
	type result struct {
		m   message
		fds []int
		err error
	}
	got := make(chan result, 1)
	go func() {
		m, fds, err := recv(s.conn)
		got <- result{m, fds, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		s.conn.Close() // unblocks the receive
		r = <-got
		closeFDs(r.fds)
		return fmt.Errorf("nsrun: start: %w", ctx.Err())
	}
	if errors.Is(r.err, io.EOF) {
		r.err = errInitGone
	}
	if r.err == nil && r.m.Kind != msgStarted {
		r.err = stageError(r.m)
	}
	if r.err != nil {
		closeFDs(r.fds)
		return fmt.Errorf("nsrun: start: %w%s", r.err, s.initExit())
	}
	if err := s.adopt(r.fds); err != nil {
		return fmt.Errorf("nsrun: start: %w", err)
	}
	s.warnings, s.landlockABI = r.m.Warnings, r.m.LandlockABI
	initPid := s.cmd.Process.Pid
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", initPid))
	if err != nil {
		return fmt.Errorf("nsrun: start: init's pid namespace: %w", err)
	}
	s.pidNS = ns
	s.workloadPid = s.hostPidOf(r.m)
	return nil
}

// hostPidOf returns the host pid of the process a started message names:
// the kernel's translation of its SCM_CREDENTIALS or, if init could not
// attach them (the kernel then gives init's own pid), a search of the
// sandbox's pid namespace; 0 if the process is gone.
func (s *Sandbox) hostPidOf(m message) int {
	if m.credPid > 0 && m.credPid != s.cmd.Process.Pid {
		return m.credPid
	}
	return hostPid(s.pidNS, m.Pid)
}

// initExit describes how init ended, if it has within a moment; for start
// errors when init died without explaining itself.
func (s *Sandbox) initExit() string {
	select {
	case <-s.initDone:
		return fmt.Sprintf(" (init: %s)", s.cmd.ProcessState)
	case <-time.After(time.Second):
		return ""
	}
}

// adopt takes over the descriptors of the started message: fdIndex order,
// without the proxy's when Start made the proxy listener.
func (s *Sandbox) adopt(fds []int) error {
	first := fdIndexProxy // the index of init's first descriptor
	if s.proxy != nil {
		first++ // Start made it: init passes the other three
	}
	if len(fds) != fdCount-first {
		closeFDs(fds)
		return fmt.Errorf("init passed %d descriptors, want %d", len(fds), fdCount-first)
	}
	files := make([]*os.File, fdCount)
	names := []string{"proxy", "dns-udp", "dns-tcp", "sock-diag"}
	for i, fd := range fds {
		files[first+i] = os.NewFile(uintptr(fd), names[first+i])
	}
	defer func() {
		for i, f := range files {
			if i != fdIndexDiag && f != nil {
				f.Close() // the net types hold duplicates
			}
		}
	}()
	s.diag = files[fdIndexDiag]
	var err error
	if s.proxy == nil {
		if s.proxy, err = net.FileListener(files[fdIndexProxy]); err != nil {
			return fmt.Errorf("proxy listener: %w", err)
		}
	}
	if s.dnsUDP, err = net.FilePacketConn(files[fdIndexDNSUDP]); err != nil {
		return fmt.Errorf("dns udp socket: %w", err)
	}
	if s.dnsTCP, err = net.FileListener(files[fdIndexDNSTCP]); err != nil {
		return fmt.Errorf("dns tcp listener: %w", err)
	}
	return nil
}

// readLoop reads init's messages after the start: the workload's exit
// status, the starts, failures and exits of exec'd processes, then end of
// file when init is gone. It never blocks on anything but the channel.
func (s *Sandbox) readLoop() {
	for {
		m, fds, err := recv(s.conn)
		closeFDs(fds)
		if errors.Is(err, errBadMessage) {
			s.log.Warn().Err(err).Msg("unreadable message from init")
			continue
		}
		if err != nil {
			s.setExit(ExitStatus{}, ErrInitExited)
			s.endProcs()
			return
		}
		switch {
		case m.Kind == msgExited && m.Status != nil && m.ID == 0:
			s.log.Debug().Stringer("status", m.Status).Msg("workload exited")
			s.setExit(*m.Status, nil)
		case m.Kind == msgExited && m.Status != nil:
			s.procExited(m.ID, *m.Status)
		case m.Kind == msgExecStarted:
			s.procStarted(m)
		case m.Kind == msgFailed && m.ID != 0:
			s.procFailed(m.ID, errors.New(m.Error))
		}
	}
}

func (s *Sandbox) setExit(st ExitStatus, err error) {
	s.exitOnce.Do(func() {
		s.status, s.waitErr = st, err
		close(s.exited)
	})
}

// Listeners returns the boundary's sockets, created inside the sandbox's
// network namespace: the proxy listener (127.0.0.1:3128), the DNS UDP
// socket and TCP listener (127.0.0.1:53) and the NETLINK_SOCK_DIAG socket.
// They stay owned by the Sandbox (Close closes them); use DupDiagFD for a
// resolver that takes ownership of its socket. Listeners of a sandbox that
// failed to start or was closed are nil (and -1).
func (s *Sandbox) Listeners() (proxy net.Listener, dnsUDP net.PacketConn, dnsTCP net.Listener, diagFD int) {
	s.listenerMu.Lock()
	defer s.listenerMu.Unlock()
	if s.diag == nil {
		return nil, nil, nil, -1
	}
	return s.proxy, s.dnsUDP, s.dnsTCP, int(s.diag.Fd())
}

// DupDiagFD returns a close-on-exec duplicate of the sock_diag socket, for
// identity.WithDiagFD (which takes ownership).
func (s *Sandbox) DupDiagFD() (int, error) {
	_, _, _, fd := s.Listeners()
	if fd < 0 {
		return -1, errors.New("nsrun: sandbox closed")
	}
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return -1, fmt.Errorf("nsrun: dup sock_diag socket: %w", err)
	}
	return d, nil
}

// InitPid is the host pid of the sandbox's init.
func (s *Sandbox) InitPid() int { return s.cmd.Process.Pid }

// WorkloadPid is the host pid of the workload (translated by the kernel
// from init's report; 0 only in the rare case that it had exited before
// init could name it).
func (s *Sandbox) WorkloadPid() int { return s.workloadPid }

// Warnings are what the start skipped (BestEffort filesystem paths, mounts
// the kernel refused, a missing resolv.conf).
func (s *Sandbox) Warnings() []string { return append([]string(nil), s.warnings...) }

// LandlockABI is the kernel's Landlock ABI the workload was restricted
// with (0: none).
func (s *Sandbox) LandlockABI() int { return s.landlockABI }

// Pids returns the host pids of every process in the sandbox's pid
// namespace, init included. It reads one link per host process (about
// 2 µs each); ProcRoot is the cheaper candidate list for identity.
func (s *Sandbox) Pids() ([]int, error) { return pidsInNS(s.pidNS) }

// ProcRoot is the sandbox's own /proc as the host reaches it through init's
// root: it lists only the sandbox's processes, numbered as inside (init is
// 1), so listing it costs the sandbox's size, not the host's. Suitable for
// identity.WithProcRoot; the workload cannot remount it.
func (s *Sandbox) ProcRoot() string { return fmt.Sprintf("/proc/%d/root/proc", s.InitPid()) }

// Done is closed when Wait would return.
func (s *Sandbox) Done() <-chan struct{} { return s.exited }

// Wait returns the workload's exit status once it has exited, or
// ErrInitExited if init ended first. Orphans the workload left keep running
// until Close.
func (s *Sandbox) Wait() (ExitStatus, error) {
	<-s.exited
	return s.status, s.waitErr
}

// Close ends the sandbox: it closes the channel to init, which exits, and
// the kernel kills every process of the pid namespace (with Spec.Output,
// init kills them itself first and passes on the output they left, within
// two seconds). If init is not gone within 5 s it is killed and Close says
// so. Close waits (5 s at most) until Output.Sink has had all of init's
// output, then closes the boundary's sockets. It is idempotent.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.conn.Close()
		select {
		case <-s.initDone:
		case <-time.After(closeGrace):
			_ = s.cmd.Process.Kill()
			<-s.initDone
			s.closeErr = fmt.Errorf("nsrun: init %d did not exit within %s of its channel closing; killed", s.cmd.Process.Pid, closeGrace)
		}
		select {
		case <-s.outputDone:
		case <-time.After(closeGrace):
			// Only init held the pipe: not reached unless a process kept
			// a descriptor init never gave.
			s.log.Warn().Dur("waited", closeGrace).Msg("the workload's output from init did not end with init; its last lines may be lost")
		}
		s.setExit(ExitStatus{}, ErrInitExited)
		s.listenerMu.Lock()
		defer s.listenerMu.Unlock()
		for _, c := range []interface{ Close() error }{s.proxy, s.dnsUDP, s.dnsTCP, s.diag} {
			if c != nil {
				c.Close()
			}
		}
		s.proxy, s.dnsUDP, s.dnsTCP, s.diag = nil, nil, nil, nil
	})
	return s.closeErr
}

// Kill SIGKILLs init (the kernel kills the rest of the sandbox) and closes.
func (s *Sandbox) Kill() error {
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("nsrun: kill init: %w", err)
	}
	return s.Close()
}

// usernsHint names the host setting that most likely made creating the
// namespaces fail, for the start error.
func usernsHint(err error) string {
	if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EACCES) {
		return ""
	}
	for _, c := range []struct {
		file, bad, msg string
	}{
		{"/proc/sys/user/max_user_namespaces", "0", "user namespaces are disabled (user.max_user_namespaces=0)"},
		{"/proc/sys/kernel/unprivileged_userns_clone", "0", "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)"},
		{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1", "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"},
	} {
		if b, err := os.ReadFile(c.file); err == nil && strings.TrimSpace(string(b)) == c.bad {
			return " (" + c.msg + ")"
		}
	}
	return ""
}
