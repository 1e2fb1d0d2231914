// Command probe is a hostile workload's toolkit for the e2e containment
// tests: it tries system calls a sandbox must refuse and prints one line
// per attempt, "NAME errno=N" (0: it worked).
package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "flood" {
		flood(os.Args[2], os.Args[3])
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "getpid" {
		n, _ := strconv.Atoi(os.Args[2])
		start := time.Now()
		for range n {
			unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
		}
		fmt.Printf("getpid ns=%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "inotify" {
		inotify()
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "spoof" {
		spoof(os.Args[2], os.Args[3])
		return
	}
	if len(os.Args) == 4 && os.Args[1] == "ptrace" {
		pid, _ := strconv.Atoi(os.Args[2])
		hold, _ := time.ParseDuration(os.Args[3])
		trace(pid, hold)
		return
	}
	var params [120]byte
	key, ring := []byte("user\x00"), []byte("k\x00")
	try := func(name string, nr uintptr, a ...uintptr) {
		args := append(a, 0, 0, 0, 0, 0, 0)
		r, _, e := unix.Syscall6(nr, args[0], args[1], args[2], args[3], args[4], args[5])
		if e == 0 && (nr == unix.SYS_SOCKET || nr == unix.SYS_IO_URING_SETUP) {
			_ = unix.Close(int(r))
		}
		fmt.Printf("%s errno=%d\n", name, int(e))
	}
	try("io_uring_setup", unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)))
	try("keyctl", unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(1), 0)
	try("add_key", unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&key[0])), uintptr(unsafe.Pointer(&ring[0])), 0, 0, ^uintptr(1))
	try("unshare_user", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	try("unshare_net", unix.SYS_UNSHARE, unix.CLONE_NEWNET|unix.CLONE_NEWNS)
	try("socket_packet", unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0x0300)
	try("socket_netlink", unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	try("socket_vsock", unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM)
	try("socket_raw", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	try("socket_tcp", unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM)
	atFDCWD := uintptr(^uint(99)) // AT_FDCWD, -100
	dev := []byte(os.TempDir() + "/probe-null\x00")
	try("mknod", unix.SYS_MKNODAT, atFDCWD, uintptr(unsafe.Pointer(&dev[0])), unix.S_IFCHR|0o666, uintptr(unix.Mkdev(1, 3)))
	try("mount", unix.SYS_MOUNT, uintptr(unsafe.Pointer(&ring[0])), uintptr(unsafe.Pointer(&dev[0])), uintptr(unsafe.Pointer(&ring[0])), 0, 0)
	try("getpid", unix.SYS_GETPID)
}

// trace acts on another process of the sandbox the ways one process can
// act through another: it attaches to pid with ptrace (PTRACE_SEIZE: the
// tracee keeps running) and stays attached for hold, rewrites one byte
// of pid's writable memory with itself through process_vm_readv and
// process_vm_writev, and opens /proc/PID/mem for writing. One line per
// attempt, "NAME errno=N" (0: it worked).
func trace(pid int, hold time.Duration) {
	addr, err := writableAddr(pid)
	if err != nil {
		fmt.Println("maps:", err)
	}
	var b [1]byte
	local := []unix.Iovec{{Base: &b[0], Len: 1}}
	remote := []unix.RemoteIovec{{Base: addr, Len: 1}}
	_, err = unix.ProcessVMReadv(pid, local, remote, 0)
	fmt.Printf("process_vm_readv errno=%d\n", errnoOf(err))
	_, err = unix.ProcessVMWritev(pid, local, remote, 0)
	fmt.Printf("process_vm_writev errno=%d\n", errnoOf(err))
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/mem", os.O_RDWR, 0)
	if err == nil {
		_ = f.Close()
	}
	fmt.Printf("procmem_write errno=%d\n", errnoOf(err))
	runtime.LockOSThread() // the tracer is this thread
	err = unix.PtraceSeize(pid)
	fmt.Printf("ptrace errno=%d\n", errnoOf(err))
	if err == nil {
		time.Sleep(hold)
	}
}

// writableAddr returns the start of pid's first private writable mapping.
func writableAddr(pid int) (uintptr, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[1] == "rw-p" {
			start, _, _ := strings.Cut(f[0], "-")
			a, err := strconv.ParseUint(start, 16, 64)
			return uintptr(a), err
		}
	}
	return 0, fmt.Errorf("no writable mapping in pid %d", pid)
}

// errnoOf is err's errno, 0 for nil, -1 for an error without one.
func errnoOf(err error) int {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return -1
}

// flood opens n connections to addr as fast as it can and holds them (a
// workload exhausting the boundary's descriptors); it prints how many
// opened, then keeps them for 5 s.
func flood(count, addr string) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	n, _ := strconv.Atoi(count)
	var conns []net.Conn
	failed := 0
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			failed++
			continue
		}
		conns = append(conns, c)
	}
	fmt.Printf("flood opened=%d failed=%d\n", len(conns), failed)
	time.Sleep(5 * time.Second)
}

// spoof opens a connection to the proxy, lets an allowed binary
// (/usr/bin/curl, kept busy reading /dev/zero slowly) inherit it, then sends its own request on
// it: identity must not take the newest holder's word. It prints the
// status line's code.
func spoof(proxyAddr, target string) {
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		fmt.Println("spoof dial:", err)
		return
	}
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		fmt.Println("spoof dup:", err)
		return
	}
	curl := exec.Command("/usr/bin/curl", "-s", "--limit-rate", "1", "-o", "/dev/null", "file:///dev/zero")
	curl.ExtraFiles = []*os.File{f}
	if err := curl.Start(); err != nil {
		fmt.Println("spoof curl:", err)
		return
	}
	_ = f.Close()
	time.Sleep(300 * time.Millisecond)
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("spoof status=%q err=%v\n", strings.TrimSpace(line), err)
	_ = curl.Process.Kill()
	_ = curl.Wait()
}

// inotify creates inotify instances until the kernel refuses one, prints
// how many it holds and the refusal's errno ("inotify held=N errno=E"),
// then holds them until killed (a workload taking its whole per-user
// quota).
func inotify() {
	n := 0
	var errno unix.Errno
	for {
		if _, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			errno, _ = err.(unix.Errno)
			break
		}
		n++
	}
	fmt.Printf("inotify held=%d errno=%d\n", n, int(errno))
	select {}
}
