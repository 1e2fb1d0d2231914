package nsrun

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// startAsOwner starts cmd, the init stage whose clone makes the sandbox's
// user namespace, with the calling thread's effective uid and gid set to
// the sandbox's base host id. The kernel makes the creating thread's euid
// the namespace's owner and charges to it the namespace and every per-user
// count of the processes inside (inotify instances and watches, nested
// namespaces): each sandbox's are then its own, not host root's.
//
// Credentials are per thread in Linux. The work runs on a goroutine locked
// to its OS thread: setresuid/setresgid by raw system call (Go's wrappers
// change every thread) set only the effective ids, so the real and saved
// uids stay 0 and the permitted capabilities survive; the effective set,
// which the switch clears, is raised again with capset, because Go's
// forkExec writes the child's uid_map and gid_map from this thread, which
// needs CAP_SETUID and CAP_SETGID over the parent namespace. The goroutine
// ends still locked, so the runtime discards the thread and its
// credentials: nothing else ever runs as that uid. The process's main
// thread, should the goroutine run there, is not discarded but set back
// to root.
func startAsOwner(cmd *exec.Cmd, uid, gid uint32) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := becomeOwner(uid, gid)
		if err == nil {
			err = cmd.Start()
		}
		if unix.Gettid() == unix.Getpid() {
			// The main thread is never discarded (the runtime parks it
			// for good), and its credentials are the process's as kill
			// and /proc see them: it gets root's ids back, or the
			// process ends.
			if rerr := becomeRoot(); rerr != nil {
				panic(fmt.Sprintf("nsrun: the main thread keeps the sandbox's uid %d: %v", uid, rerr))
			}
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// becomeRoot sets this thread's effective uid and gid back to 0 (the
// kernel restores the effective capabilities from the permitted set).
func becomeRoot() error {
	const unchanged = ^uintptr(0)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, 0, unchanged); e != 0 {
		return fmt.Errorf("setresuid(-1, 0, -1): %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, unchanged, 0, unchanged); e != 0 {
		return fmt.Errorf("setresgid(-1, 0, -1): %w", e)
	}
	return nil
}

// becomeOwner sets this thread's effective uid and gid, keeping its
// capabilities effective.
func becomeOwner(uid, gid uint32) error {
	const unchanged = ^uintptr(0) // -1: leave the real and saved ids
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, unchanged, uintptr(gid), unchanged); e != 0 {
		return fmt.Errorf("user namespace owner: setresgid(-1, %d, -1): %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, unchanged, uintptr(uid), unchanged); e != 0 {
		return fmt.Errorf("user namespace owner: setresuid(-1, %d, -1): %w", uid, e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("user namespace owner: capget: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("user namespace owner: capset: %w", err)
	}
	return nil
}

// inotifyLimits are per-uid inotify limits of one user namespace (the
// per-namespace sysctls user.max_inotify_instances and
// user.max_inotify_watches; 0: left as the kernel made them).
type inotifyLimits struct {
	Instances int64 `json:"instances,omitempty"`
	Watches   int64 `json:"watches,omitempty"`
}

// hostInotifyShare is what each uid inside a sandbox may hold: half of a
// host user's limits (fs.inotify.max_user_instances and
// max_user_watches, 128 and a memory-derived number of watches by
// default). The kernel counts an instance against the limit of every user
// namespace up the chain: inside, per uid, against these; on the host,
// against the host's per-user limits for the namespace's owner. As root
// that owner is the sandbox's own base uid, so the host's limits are the
// sandbox's whole share and no uid inside (the workload's) may take more
// than half of it at once; unprivileged, every sandbox's owner is the
// gateway's user, whose one share the sandboxes and the user's own
// processes draw on, and no sandbox may take more than half of it.
func hostInotifyShare() inotifyLimits {
	half := func(file string) int64 {
		b, err := os.ReadFile(file)
		n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || perr != nil || n <= 0 {
			return 0
		}
		return max(n/2, 1)
	}
	return inotifyLimits{
		Instances: half("/proc/sys/fs/inotify/max_user_instances"),
		Watches:   half("/proc/sys/fs/inotify/max_user_watches"),
	}
}

// setInotifyLimits runs in init, root of the sandbox's user namespace
// (CAP_SYS_RESOURCE there): the user.* sysctls a process writes are those
// of its own user namespace. It returns a warning for each limit it could
// not set (the host's per-user limits still bound the sandbox).
func setInotifyLimits(l inotifyLimits) []string {
	var warnings []string
	for _, s := range []struct {
		file string
		n    int64
	}{{"/proc/sys/user/max_inotify_instances", l.Instances}, {"/proc/sys/user/max_inotify_watches", l.Watches}} {
		if s.n <= 0 {
			continue
		}
		if err := os.WriteFile(s.file, []byte(strconv.FormatInt(s.n, 10)), 0); err != nil {
			warnings = append(warnings, fmt.Sprintf("inotify limit %s=%d not set: %v", s.file, s.n, err))
		}
	}
	return warnings
}
