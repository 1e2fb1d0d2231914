package nsrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// keptCaps is the bounding set of a uid-0 workload (a non-zero uid has no
// capability at all), each inside the sandbox's own user namespace, so
// over the sandbox's files and processes only:
//   - CHOWN, DAC_OVERRIDE, FOWNER, FSETID: a root workload (a package
//     manager, a build) owns and fixes up the files it makes;
//   - SETUID, SETGID: dropping to another sandbox uid (su, a build user);
//   - KILL: signalling its own processes of other uids;
//   - NET_BIND_SERVICE: a test server on a port below 1024 on its loopback.
//
// Dropped from Docker's default set: NET_RAW (raw and packet sockets,
// ping), MKNOD (device nodes), SETFCAP (file capabilities), SETPCAP,
// SYS_CHROOT and AUDIT_WRITE; and, as in Docker, everything that could undo
// the sandbox (SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, ...).
const keptCaps uint64 = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER |
	1<<unix.CAP_FSETID | 1<<unix.CAP_KILL | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID |
	1<<unix.CAP_NET_BIND_SERVICE

// runExec is the exec stage: it prepares the credentials and Landlock on
// this (locked) thread and execs the workload. It returns only on failure.
func runExec() int {
	conn, err := fileConn(fdChannel)
	if err != nil {
		return exitNoChannel
	}
	fail := func(err error) int {
		_ = send(conn, failure(0, err))
		return exitFailed
	}
	m, fds, err := recv(conn)
	closeFDs(fds)
	if err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	if m.Kind != msgConfig || m.Config == nil {
		return fail(fmt.Errorf("first message is %s, want config", m.Kind))
	}
	cfg := m.Config
	path, err := lookPath(cfg.Argv[0], cfg.Env)
	if err != nil {
		return fail(err)
	}
	abi, warnings, err := prepareWorkload(cfg)
	if err != nil {
		return fail(err)
	}
	var filter []bpf.RawInstruction
	if !cfg.NoSeccomp {
		if filter, err = seccompProgram(cfg.AllowPtrace); err != nil {
			return fail(err)
		}
	}
	if err := send(conn, message{Kind: msgReady, Warnings: warnings, LandlockABI: abi}); err != nil {
		return exitFailed
	}
	// Nothing this binary holds may reach the workload: the channel to
	// init, descriptors inherited from init or the parent.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(fmt.Errorf("close_range(3, ~0, CLOSE_RANGE_CLOEXEC): %w", err))
	}
	if err := defaultSignals(); err != nil {
		return fail(err)
	}
	// Last: the filter denies calls the steps above make.
	if filter != nil {
		if err := applySeccomp(filter); err != nil {
			return fail(err)
		}
	}
	err = syscall.Exec(path, cfg.Argv, cfg.Env)
	return fail(execFailure(path, err, cfg))
}

// prepareWorkload sets the workload's ids, capabilities, working directory,
// no_new_privs and Landlock domain on this thread.
func prepareWorkload(cfg *stageConfig) (int, []string, error) {
	if err := trimCaps(); err != nil {
		return 0, nil, err
	}
	if cfg.SetGroups {
		if err := syscall.Setgroups(nil); err != nil {
			return 0, nil, fmt.Errorf("setgroups: %w", err)
		}
	}
	if err := syscall.Setresgid(int(cfg.GID), int(cfg.GID), int(cfg.GID)); err != nil {
		return 0, nil, fmt.Errorf("setresgid %d: %w", cfg.GID, err)
	}
	if err := syscall.Setresuid(int(cfg.UID), int(cfg.UID), int(cfg.UID)); err != nil {
		return 0, nil, fmt.Errorf("setresuid %d: %w", cfg.UID, err)
	}
	if err := unix.Chdir(cfg.Workdir); err != nil {
		err = fmt.Errorf("workdir %s: %w", cfg.Workdir, err)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
			err = permanent(fmt.Errorf("%w: the working directory must exist in the sandbox and be allowed by its filesystem_policy: create it in the workspace, or choose another", err))
		}
		return 0, nil, err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return 0, nil, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	root, err := openRoot("/")
	if err != nil {
		return 0, nil, fmt.Errorf("landlock: %w", err)
	}
	defer unix.Close(root)
	return applyLandlock(cfg.Mode, landlockRules(cfg), newResolver(root, writablePaths(cfg)))
}

// landlockRules are the policy's paths, then the baseline's (skipped
// silently when missing, in either mode), then /dev/null and /dev/zero.
func landlockRules(cfg *stageConfig) []pathRule {
	rules := make([]pathRule, 0, len(cfg.ReadOnly)+len(cfg.ReadWrite)+len(cfg.BaselineReadOnly)+len(cfg.BaselineReadWrite)+2)
	for _, p := range cfg.ReadOnly {
		rules = append(rules, pathRule{list: "read_only", path: p, access: accessReadOnly})
	}
	for _, p := range cfg.ReadWrite {
		rules = append(rules, pathRule{list: "read_write", path: p, access: accessAll})
	}
	for _, p := range cfg.BaselineReadOnly {
		rules = append(rules, pathRule{list: "baseline read_only", path: p, access: accessReadOnly, optional: true})
	}
	for _, p := range cfg.BaselineReadWrite {
		rules = append(rules, pathRule{list: "baseline read_write", path: p, access: accessAll, optional: true})
	}
	for _, p := range []string{"/dev/null", "/dev/zero"} {
		rules = append(rules, pathRule{list: "always", path: p, access: accessAll})
	}
	return rules
}

// trimCaps empties the inheritable and ambient sets and cuts the bounding
// set down to keptCaps. A non-zero uid ends up with no capabilities at all
// after execve; uid 0 with keptCaps.
func trimCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if keptCaps&(1<<c) != 0 {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) { // past the kernel's last capability
			break
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// lookPath resolves name like execvp, with the workload's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", permanent(fmt.Errorf("%s: executable not found in PATH %q: the command is not in the sandbox; check its name, or give its absolute path", name, path))
}

// defaultSignals gives the workload default signal dispositions and an
// empty signal mask: execve keeps ignored signals ignored (a supervisor run
// under nohup ignores SIGHUP) and keeps the mask. Go's own handlers are
// reset by execve itself.
func defaultSignals() error {
	// struct kernel_sigaction: handler, flags, restorer, mask.
	type sigaction struct{ handler, flags, restorer, mask uint64 }
	const sigIgn = 1
	for sig := 1; sig <= 64; sig++ {
		var old sigaction
		_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
		if e != 0 || old.handler != sigIgn {
			continue // invalid number, or not ignored
		}
		dfl := sigaction{}
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0); e != 0 {
			return fmt.Errorf("rt_sigaction(%d, SIG_DFL): %w", sig, e)
		}
	}
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		return fmt.Errorf("sigprocmask: %w", err)
	}
	return nil
}
