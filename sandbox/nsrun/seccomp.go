package nsrun

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The workload's seccomp filter: an allowlist in the spirit of Docker's
// default profile (a system call not listed fails with EPERM, not a kill,
// so programs see an ordinary error), with argument checks for what is
// allowed only in part. It is installed by the exec stage right before
// execve, after everything the stage itself needs (capabilities, ids,
// Landlock, close_range), so it binds the workload and every process it or
// an exec starts; init stays outside.
//
// Denied, beyond what the allowlist leaves out anyway: io_uring_*;
// keyctl, add_key, request_key (the kernel keyrings are not namespaced);
// unshare and clone with a namespace flag, clone3 (ENOSYS: its flags are
// behind a pointer, so libc falls back to clone), setns; the mount family
// (mount, umount2, pivot_root, open_tree, move_mount, fsopen, fsconfig,
// fsmount, fspick, mount_setattr); bpf, perf_event_open, userfaultfd;
// seccomp with SECCOMP_FILTER_FLAG_NEW_LISTENER (a listener's ADDFD);
// kexec_*, module syscalls, reboot, swapon/off, acct, quotactl; personality
// beyond Docker's safe values; sockets of the families AF_PACKET,
// AF_NETLINK, AF_VSOCK, AF_BLUETOOTH, and raw sockets of any family;
// ptrace, process_vm_readv and process_vm_writev unless the policy allows
// them (stockade.allow_ptrace): with them one process of the sandbox acts
// through another, and the boundary judges a connection by the binary of
// the process that holds it (boundary/identity). Writing another
// process's memory through /proc/PID/mem is refused by Landlock instead
// (/proc is read-only in the baseline); reading it is not.

// allowedSyscalls is the allowlist; names a platform lacks are skipped.
func allowedSyscalls() []string {
	return strings.Fields(`
accept accept4 access adjtimex alarm arch_prctl bind brk cachestat capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64 clock_nanosleep
clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2 dup3 epoll_create epoll_create1
epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit
exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod fchmodat fchmodat2
fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat
fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex futex_requeue futex_time64 futex_wait
futex_waitv futex_wake futimesat get_mempolicy get_robust_list get_thread_area getcpu getcwd getdents getdents64
getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp
getpid getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit getrusage getsid
getsockname getsockopt gettid gettimeofday getuid getuid32 getxattr inotify_add_watch inotify_init inotify_init1
inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents io_pgetevents_time64 io_setup io_submit ioctl
ioprio_get ioprio_set ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown lchown32
lgetxattr link linkat listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise
map_shadow_stack mbind membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2
mlockall mmap mmap2 modify_ldt mprotect mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedreceive_time64
mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget msgrcv msgsnd msync munlock munlockall munmap
name_to_handle_at nanosleep newfstatat _newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe
pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2
read readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg remap_file_pages
removexattr rename renameat renameat2 restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask
rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
sched_get_priority_max sched_get_priority_min sched_getaffinity sched_getattr sched_getparam sched_getscheduler
sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam
sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64 send sendfile
sendfile64 sendmmsg sendmsg sendto set_mempolicy set_robust_list set_thread_area set_tid_address setfsgid
setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority setregid
setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32 setrlimit setsid setsockopt setuid
setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn
socketcall socketpair splice stat stat64 statfs statfs64 statx symlink symlinkat sync sync_file_range syncfs
sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime
timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill
truncate truncate64 ugetrlimit umask uname unlink unlinkat utime utimensat utimensat_time64 utimes vfork
vmsplice wait4 waitid waitpid write writev`)
}

// ptraceSyscalls are allowed only where the policy allows the sandbox's
// processes to trace and read or write one another.
func ptraceSyscalls() []string {
	return []string{"ptrace", "process_vm_readv", "process_vm_writev"}
}

// Namespace flags of clone and unshare (CLONE_NEWTIME only for unshare:
// in clone's flags that bit belongs to the exit signal).
const (
	nsFlags      = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareFlags = nsFlags | unix.CLONE_NEWTIME
)

// Return values and seccomp_data offsets (little-endian: an argument's
// low 32 bits are at its start; every checked argument is an int or its
// low 32 bits are what the kernel reads).
const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retEPERM  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	offNr     = 0
	offArch   = 4
	offArgs   = 16
	x32Bit    = 0x40000000
)

// auditArch is the AUDIT_ARCH_* of the architectures the filter is built
// for; another fails closed (the sandbox does not start).
func auditArch(goarch string) (uint32, bool) {
	switch goarch {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// seccompProgram builds the workload's filter for this machine;
// allowPtrace adds ptraceSyscalls to the allowlist.
func seccompProgram(allowPtrace bool) ([]bpf.RawInstruction, error) {
	auditID, ok := auditArch(runtime.GOARCH)
	info, err := arch.GetInfo("")
	if !ok || err != nil {
		return nil, fmt.Errorf("seccomp: no workload filter for architecture %s (refusing to run the workload unfiltered)", runtime.GOARCH)
	}
	nr := func(name string) (uint32, bool) {
		n, ok := info.SyscallNames[name]
		return uint32(n), ok
	}
	var a asm
	deny, allow, enosys := a.label(), a.label(), a.label()
	a.ld(offArch)
	archOK := a.label()
	a.jif(bpf.JumpEqual, auditID, archOK, deny)
	a.mark(archOK)
	a.ld(offNr)
	if runtime.GOARCH == "amd64" { // the x32 ABI shares the arch value
		not32 := a.label()
		a.jif(bpf.JumpGreaterOrEqual, x32Bit, deny, not32)
		a.mark(not32)
	}
	// Calls allowed in part: each checks its arguments, then allows.
	arg := func(i int) { a.ld(offArgs + 8*uint32(i)) }
	special := map[string]func(){
		"socket": func() {
			arg(0)
			for _, fam := range []uint32{unix.AF_PACKET, unix.AF_NETLINK, unix.AF_VSOCK, unix.AF_BLUETOOTH} {
				a.jeqOr(fam, deny)
			}
			arg(1)
			for _, flags := range []uint32{0, unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC, unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC} {
				a.jeqOr(unix.SOCK_RAW|flags, deny)
			}
			a.jmp(allow)
		},
		"clone": func() {
			arg(0)
			a.jsetOr(nsFlags, deny)
			a.jmp(allow)
		},
		"unshare": func() {
			arg(0)
			a.jsetOr(unshareFlags, deny)
			a.jmp(allow)
		},
		"personality": func() {
			arg(0)
			for _, v := range []uint32{0, 0x0008, 0x20000, 0x20008, 0xffffffff} { // Docker's safe values and the query
				a.jeqOr(v, allow)
			}
			a.jmp(deny)
		},
		// A filter may be stacked, but not with a listener: a listener's
		// ADDFD puts descriptors into a process that is not running, and
		// the boundary's holder scans skip processes that have not run
		// (boundary/identity, quiet.go).
		"seccomp": func() {
			arg(1)
			a.jsetOr(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, deny)
			a.jmp(allow)
		},
		"clone3": func() { a.jmp(enosys) },
	}
	names := make([]string, 0, len(special))
	for n := range special {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		n, ok := nr(name)
		if !ok {
			continue
		}
		here, next := a.label(), a.label()
		a.jif(bpf.JumpEqual, n, here, next)
		a.mark(here)
		special[name]()
		a.mark(next)
		a.ld(offNr)
	}
	var allowed []uint32
	list := allowedSyscalls()
	if allowPtrace {
		list = append(list, ptraceSyscalls()...)
	}
	for _, name := range list {
		if n, ok := nr(name); ok {
			allowed = append(allowed, n)
		}
	}
	sort.Slice(allowed, func(i, j int) bool { return allowed[i] < allowed[j] })
	a.tree(allowed, allow, deny)
	a.mark(deny)
	a.ret(retEPERM)
	a.mark(allow)
	a.ret(retAllow)
	a.mark(enosys)
	a.ret(retENOSYS)
	prog, err := a.assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return prog, nil
}

// applySeccomp installs the filter on this thread (it binds what this
// thread execs). no_new_privs is already set.
func applySeccomp(prog []bpf.RawInstruction) error {
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	return nil
}

// asm is a classic-BPF assembler with forward labels. Every branch is a
// conditional skip over one of two unconditional jumps, so no target is
// ever out of reach of an 8-bit skip.
type asm struct {
	ins    []bpf.Instruction
	labels []int       // label -> instruction index (-1: not placed)
	fixups map[int]int // instruction index of a ja -> its label
}

func (a *asm) label() int { a.labels = append(a.labels, -1); return len(a.labels) - 1 }
func (a *asm) mark(l int) { a.labels[l] = len(a.ins) }
func (a *asm) ld(off uint32) {
	a.ins = append(a.ins, bpf.LoadAbsolute{Off: off, Size: 4})
}
func (a *asm) ret(v uint32) { a.ins = append(a.ins, bpf.RetConstant{Val: v}) }
func (a *asm) jmp(l int) {
	if a.fixups == nil {
		a.fixups = map[int]int{}
	}
	a.fixups[len(a.ins)] = l
	a.ins = append(a.ins, bpf.Jump{})
}

// jif jumps to t when the accumulator passes cond against val, else to f.
func (a *asm) jif(cond bpf.JumpTest, val uint32, t, f int) {
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val, SkipTrue: 0, SkipFalse: 1})
	a.jmp(t)
	a.jmp(f)
}

// jeqOr jumps to t when the accumulator equals val, else falls through.
func (a *asm) jeqOr(val uint32, t int) {
	a.ins = append(a.ins, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: val, SkipTrue: 1})
	a.jmp(t)
}

// jsetOr jumps to t when the accumulator has any bit of mask, else falls
// through.
func (a *asm) jsetOr(mask uint32, t int) {
	a.ins = append(a.ins, bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: mask, SkipTrue: 1})
	a.jmp(t)
}

// tree jumps to in when the accumulator (a syscall number) is one of the
// sorted nums, else to out: a binary search with short linear leaves.
func (a *asm) tree(nums []uint32, in, out int) {
	if len(nums) <= 4 {
		for _, n := range nums {
			a.jeqOr(n, in)
		}
		a.jmp(out)
		return
	}
	mid := len(nums) / 2
	lo, hi := a.label(), a.label()
	a.jif(bpf.JumpGreaterOrEqual, nums[mid], hi, lo)
	a.mark(lo)
	a.tree(nums[:mid], in, out)
	a.mark(hi)
	a.tree(nums[mid:], in, out)
}

// assemble resolves the labels (all forward) and encodes the program.
func (a *asm) assemble() ([]bpf.RawInstruction, error) {
	for i, l := range a.fixups {
		to := a.labels[l]
		if to <= i {
			return nil, fmt.Errorf("label %d at %d is not after its jump at %d", l, to, i)
		}
		a.ins[i] = bpf.Jump{Skip: uint32(to - i - 1)}
	}
	if len(a.ins) > 4096 {
		return nil, fmt.Errorf("filter of %d instructions (the kernel takes 4096)", len(a.ins))
	}
	return bpf.Assemble(a.ins)
}
