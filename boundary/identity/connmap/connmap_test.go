package connmap

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/internal/testenv"
)

func open(t *testing.T) *Map {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading a BPF program needs root")
	}
	m, err := Open()
	if err != nil {
		testenv.Unavailable(t, "connmap: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func bootTime(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

func netnsOf(t *testing.T, c net.Conn) uint64 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cookie uint64
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cookie, gerr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	}); err != nil || gerr != nil {
		t.Fatalf("SO_NETNS_COOKIE: %v %v", err, gerr)
	}
	return cookie
}

func ends(c net.Conn) (client, server netip.AddrPort) {
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
}

func acceptOne(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialMapped connects an AF_INET6 socket to ::ffff:127.0.0.1:port, the
// way a dual-stack client reaches an IPv4 listener.
func dialMapped(t *testing.T, port int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	sa := &unix.SockaddrInet6{Port: port, Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
	if err := unix.Connect(fd, sa); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsEachFamily: a connect from this process over IPv4, IPv6 and
// an AF_INET6 socket to a v4-mapped address is recorded under the ends the
// server sees, with this process's pid and uid and a time between before
// and after the connect; Take forgets it.
func TestRecordsEachFamily(t *testing.T) {
	m := open(t)
	for _, tc := range []struct{ name, network, addr string }{
		{"ipv4", "tcp4", "127.0.0.1:0"},
		{"ipv6", "tcp6", "[::1]:0"},
		{"v4-mapped", "tcp4", "127.0.0.1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen(tc.network, tc.addr)
			if err != nil {
				testenv.Unavailable(t, "listen %s %s: %v", tc.network, tc.addr, err)
			}
			defer ln.Close()
			before := bootTime(t)
			if tc.name == "v4-mapped" {
				dialMapped(t, ln.Addr().(*net.TCPAddr).Port)
			} else {
				c, err := net.Dial(tc.network, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			after := bootTime(t)
			s := acceptOne(t, ln)
			client, server := ends(s)
			got, ok, err := m.Take(netnsOf(t, s), client, server)
			if err != nil || !ok {
				t.Fatalf("take %s -> %s: ok %v, %v", client, server, ok, err)
			}
			if got.Pid != os.Getpid() || got.UID != uint32(os.Getuid()) || got.At < before || got.At > after {
				t.Fatalf("record %+v, want pid %d uid %d at in [%s, %s]", got, os.Getpid(), os.Getuid(), before, after)
			}
			if _, ok, err := m.Take(netnsOf(t, s), client, server); ok || err != nil {
				t.Fatalf("second take: ok %v, %v; want no record", ok, err)
			}
			if _, ok, _ := m.Take(netnsOf(t, s)+1, client, server); ok {
				t.Fatal("a record matched another network namespace's cookie")
			}
		})
	}
}

// TestConnectBeforeOpenIsNotRecorded: a connection made before the program
// was attached has no record (the resolver then asks sock_diag).
func TestConnectBeforeOpenIsNotRecorded(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading a BPF program needs root")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := acceptOne(t, ln)
	m := open(t)
	client, server := ends(s)
	if got, ok, err := m.Take(netnsOf(t, s), client, server); ok || err != nil {
		t.Fatalf("record %+v (ok %v, %v) for a connect made before Open", got, ok, err)
	}
}

// TestResolverUsesRecords: boundary serve's resolver with the records
// identifies a child process's connection from its record (no sock_diag:
// Socket stays 0): the child's pid, its exe and this test as its parent.
func TestResolverUsesRecords(t *testing.T) {
	m := open(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		testenv.Unavailable(t, "bash: %v", err)
	}
	bash, _ = filepath.EvalSymlinks(bash)
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	cmd := exec.Command(bash, "-c", `exec 3<>/dev/tcp/127.0.0.1/$0; echo $$; read -r _`, port)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	s := acceptOne(t, ln)
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	r, err := identity.NewNetlink(identity.WithConnectRecords(m))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	client, server := ends(s)
	id, err := r.Resolve(context.Background(), server, client)
	if err != nil {
		t.Fatal(err)
	}
	if id.Pid != pid || id.Exe != bash || id.Socket != 0 || len(id.Ancestors) == 0 || id.Ancestors[0] != self {
		t.Fatalf("identity %+v, want pid %d exe %s from the record (socket 0), parent %s", id, pid, bash, self)
	}
}
