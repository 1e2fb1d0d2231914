package nsrun

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const helperSeccomp = "seccomp"

// helperAllowPtrace, set to 1 in the seccomp helper's environment, builds
// the filter with ptrace allowed (stockade.allow_ptrace).
const helperAllowPtrace = "NSRUN_TEST_ALLOW_PTRACE"

// seccompProbes are raw system calls and the errno each must end with under
// the workload's filter (0: allowed), built with ptrace allowed or not.
func seccompProbes(allowPtrace bool) []struct {
	name string
	want syscall.Errno
	call func() syscall.Errno
} {
	sys6 := func(nr uintptr, a ...uintptr) func() syscall.Errno {
		args := append(a, 0, 0, 0, 0, 0, 0)
		return func() syscall.Errno {
			r, _, e := unix.RawSyscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
			if e == 0 && (nr == unix.SYS_SOCKET || nr == unix.SYS_IO_URING_SETUP) {
				_ = unix.Close(int(r))
			}
			return e
		}
	}
	var uringParams [120]byte
	key, keyring := []byte("user\x00"), []byte("k\x00")
	// Allowed, the ptrace calls fail on their arguments: no process
	// 0x3fffffff (ESRCH), flags that must be 0 (EINVAL).
	const noPid = 0x3fffffff
	traceWant, vmWant := unix.EPERM, unix.EPERM
	if allowPtrace {
		traceWant, vmWant = unix.ESRCH, unix.EINVAL
	}
	return []struct {
		name string
		want syscall.Errno
		call func() syscall.Errno
	}{
		{"getpid", 0, sys6(unix.SYS_GETPID)},
		{"socket(AF_INET, SOCK_STREAM)", 0, sys6(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC)},
		{"socket(AF_UNIX, SOCK_DGRAM)", 0, sys6(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_DGRAM)},
		{"socket(AF_INET6, SOCK_DGRAM)", 0, sys6(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK)},
		{"socket(AF_PACKET, SOCK_RAW)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0x0300)},
		{"socket(AF_PACKET, SOCK_DGRAM)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_DGRAM, 0x0300)},
		{"socket(AF_INET, SOCK_RAW, ICMP)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)},
		{"socket(AF_NETLINK)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_ROUTE)},
		{"socket(AF_VSOCK)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM)},
		{"socket(AF_BLUETOOTH)", unix.EPERM, sys6(unix.SYS_SOCKET, unix.AF_BLUETOOTH, unix.SOCK_STREAM)},
		{"io_uring_setup", unix.EPERM, sys6(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&uringParams)))},
		{"add_key", unix.EPERM, sys6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&key[0])), uintptr(unsafe.Pointer(&keyring[0])), 0, 0, ^uintptr(1))},
		{"keyctl", unix.EPERM, sys6(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(1), 0)},
		{"request_key", unix.EPERM, sys6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(&key[0])), uintptr(unsafe.Pointer(&keyring[0])), 0, 0)},
		{"unshare(CLONE_NEWUSER)", unix.EPERM, sys6(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
		{"unshare(CLONE_NEWNET)", unix.EPERM, sys6(unix.SYS_UNSHARE, unix.CLONE_NEWNET)},
		{"unshare(CLONE_NEWTIME)", unix.EPERM, sys6(unix.SYS_UNSHARE, unix.CLONE_NEWTIME)},
		{"unshare(CLONE_FS)", 0, sys6(unix.SYS_UNSHARE, unix.CLONE_FS)},
		{"clone(CLONE_NEWUSER)", unix.EPERM, sys6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD))},
		{"clone3", unix.ENOSYS, sys6(unix.SYS_CLONE3, 0, 0)},
		{"setns", unix.EPERM, sys6(unix.SYS_SETNS, 0, 0)},
		{"mount", unix.EPERM, sys6(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
		{"umount2", unix.EPERM, sys6(unix.SYS_UMOUNT2, 0, 0)},
		{"pivot_root", unix.EPERM, sys6(unix.SYS_PIVOT_ROOT, 0, 0)},
		{"open_tree", unix.EPERM, sys6(unix.SYS_OPEN_TREE, 0, 0, 0)},
		{"fsopen", unix.EPERM, sys6(unix.SYS_FSOPEN, 0, 0)},
		{"bpf", unix.EPERM, sys6(unix.SYS_BPF, 0, 0, 0)},
		{"perf_event_open", unix.EPERM, sys6(unix.SYS_PERF_EVENT_OPEN, 0, 0, 0, 0, 0)},
		{"userfaultfd", unix.EPERM, sys6(unix.SYS_USERFAULTFD, 0)},
		{"kexec_load", unix.EPERM, sys6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)},
		{"init_module", unix.EPERM, sys6(unix.SYS_INIT_MODULE, 0, 0, 0)},
		{"delete_module", unix.EPERM, sys6(unix.SYS_DELETE_MODULE, 0, 0)},
		{"reboot", unix.EPERM, sys6(unix.SYS_REBOOT, 0, 0, 0, 0)},
		{"seccomp(SET_MODE_FILTER, NEW_LISTENER)", unix.EPERM, sys6(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, 0)},
		{"seccomp(SET_MODE_FILTER, NULL program)", unix.EFAULT, sys6(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, 0)},
		{"personality(query)", 0, sys6(unix.SYS_PERSONALITY, 0xffffffff)},
		{"personality(READ_IMPLIES_EXEC)", unix.EPERM, sys6(unix.SYS_PERSONALITY, 0x0400000)},
		{"ptrace(PTRACE_ATTACH)", traceWant, sys6(unix.SYS_PTRACE, unix.PTRACE_ATTACH, noPid, 0, 0)},
		{"ptrace(PTRACE_SEIZE)", traceWant, sys6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, noPid, 0, 0)},
		{"process_vm_readv", vmWant, sys6(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 1)},
		{"process_vm_writev", vmWant, sys6(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid()), 0, 0, 0, 0, 1)},
	}
}

// seccompHelper applies the workload filter to its locked thread and runs
// every probe there; it prints {probe: errno}.
func seccompHelper() int {
	runtime.LockOSThread()
	out := map[string]int{}
	allowPtrace := os.Getenv(helperAllowPtrace) == "1"
	p, err := seccompProgram(allowPtrace)
	if err == nil {
		if err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err == nil {
			err = applySeccomp(p)
		}
	}
	if err != nil {
		out["error: "+err.Error()] = -1
	} else {
		for _, pr := range seccompProbes(allowPtrace) {
			out[pr.name] = int(pr.call())
		}
	}
	b, _ := json.Marshal(out)
	os.Stdout.Write(append(b, '\n'))
	return 0
}

// TestSeccompFilter: under the workload's filter each probe ends as the
// design says (in a process of its own: the filter cannot be taken off),
// with ptrace and process_vm_* refused by default and allowed, reaching
// the kernel's own checks, with stockade.allow_ptrace.
func TestSeccompFilter(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, allowPtrace := range []bool{false, true} {
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+helperSeccomp)
		if allowPtrace {
			cmd.Env = append(cmd.Env, helperAllowPtrace+"=1")
		}
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper: %v %s", err, b)
		}
		var got map[string]int
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("helper output %q: %v", b, err)
		}
		for _, pr := range seccompProbes(allowPtrace) {
			g, ok := got[pr.name]
			if !ok {
				t.Fatalf("no result for %s: %v", pr.name, got)
			}
			if syscall.Errno(g) != pr.want {
				t.Errorf("allow ptrace %v: %s: errno %d (%v), want %d (%v)", allowPtrace, pr.name, g, syscall.Errno(g), int(pr.want), pr.want)
			}
		}
	}
}
