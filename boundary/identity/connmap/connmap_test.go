package connmap

import (
	"bufio"
	"context"
	"errors"
	"io"
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

func open(t *testing.T, opts ...Option) *Map {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "loading a BPF program needs root")
	}
	m, err := Open(opts...)
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
func dialMapped(t *testing.T, port int) (inode uint32) {
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
	return fdInode(t, fd)
}

// fdInode returns the inode of the socket fd.
func fdInode(t *testing.T, fd int) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return uint32(st.Ino)
}

// connInode returns the inode of c's socket.
func connInode(t *testing.T, c net.Conn) uint32 {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ino uint32
	if err := raw.Control(func(fd uintptr) { ino = fdInode(t, int(fd)) }); err != nil {
		t.Fatal(err)
	}
	return ino
}

// TestRecordsEachFamily: a connect from this process over IPv4, IPv6 and
// an AF_INET6 socket to a v4-mapped address is recorded under the ends the
// server sees, with this process's pid and uid, a time between before and
// after the connect and the connecting socket's inode (0 from the program
// without the inode); Take forgets it.
func TestRecordsEachFamily(t *testing.T) {
	t.Run("inode", func(t *testing.T) {
		m := open(t)
		if err := errors.Join(m.InodeErr(), m.ImageErr()); err != nil {
			testenv.Unavailable(t, "%v", err)
		}
		recordsEachFamily(t, m, true)
	})
	t.Run("no-inode", func(t *testing.T) { recordsEachFamily(t, open(t, withoutInode()), false) })
}

// execOf is the Exec of process pid ("self": this one) as /proc shows
// it: its executable's device and inode, and the code and stack addresses
// of its stat.
func execOf(t *testing.T, pid string) identity.Exec {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+pid+"/exe", &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:])) // from the state, field 3
	code, err1 := strconv.ParseUint(f[26-3], 10, 64)
	stack, err2 := strconv.ParseUint(f[28-3], 10, 64)
	if err1 != nil || err2 != nil || code == 0 || stack == 0 {
		t.Fatalf("stat's startcode %q, startstack %q: %v %v", f[26-3], f[28-3], err1, err2)
	}
	return identity.Exec{Dev: st.Dev, Ino: st.Ino, Code: code, Stack: stack}
}

func recordsEachFamily(t *testing.T, m *Map, inodes bool) {
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
			var inode uint32
			if tc.name == "v4-mapped" {
				inode = dialMapped(t, ln.Addr().(*net.TCPAddr).Port)
			} else {
				c, err := net.Dial(tc.network, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				inode = connInode(t, c)
			}
			if !inodes {
				inode = 0
			}
			after := bootTime(t)
			s := acceptOne(t, ln)
			client, server := ends(s)
			got, ok, err := m.Take(netnsOf(t, s), client, server)
			if err != nil || !ok {
				t.Fatalf("take %s -> %s: ok %v, %v", client, server, ok, err)
			}
			var exec identity.Exec
			if inodes {
				exec = execOf(t, "self")
			}
			if got.Pid != os.Getpid() || got.UID != uint32(os.Getuid()) || got.At < before || got.At > after || got.Inode != inode || got.Exec != exec {
				t.Fatalf("record %+v, want pid %d uid %d at in [%s, %s] inode %d exec %+v", got, os.Getpid(), os.Getuid(), before, after, inode, exec)
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

// TestResolverUsesRecords: a resolver with the records identifies a child
// process's connection from its record: the child's pid, its exe, this
// test as its parent, and the socket's inode as the child's fd 3 names it.
// boundary serve's (every process a candidate) and a sandbox's (bounded
// candidates: the child and this test) both do.
func TestResolverUsesRecords(t *testing.T) {
	m := open(t)
	if err := m.InodeErr(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	bash := tool(t, "bash")
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	ln, port := loopback(t)
	for _, bounded := range []bool{false, true} {
		cmd, stdin, s, pid := connectChild(t, ln, bash, `exec 3<>/dev/tcp/127.0.0.1/$0; echo $$; read -r _`, port)
		var st unix.Stat_t
		if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/fd/3", &st); err != nil {
			t.Fatal(err)
		}
		id, src, err := resolveRecorded(t, m, s, bounded, pid)
		stdin.Close()
		_ = cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if id.Pid != pid || id.Exe != bash || id.Socket != uint32(st.Ino) || id.Holders != nil || len(id.Ancestors) == 0 || id.Ancestors[0] != self {
			t.Fatalf("bounded %v: identity %+v, want pid %d exe %s socket %d, parent %s", bounded, id, pid, bash, st.Ino, self)
		}
		if src != (identity.Sources{Records: 1}) {
			t.Fatalf("bounded %v: identified %+v, want from the record (a silent fall back to sock_diag)", bounded, src)
		}
	}
}

// tool returns the real path of an installed program (as /proc's exe
// names it).
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Unavailable(t, "%s: %v", name, err)
	}
	p, _ = filepath.EvalSymlinks(p)
	return p
}

// loopback listens on 127.0.0.1 until the test ends; it returns the
// listener and its port.
func loopback(t *testing.T) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// resolveRecorded identifies s's client with m's records, as boundary
// serve does (every process a candidate) or, bounded, as a sandbox's
// boundary does (this test and pid the candidates).
func resolveRecorded(t *testing.T, m *Map, s net.Conn, bounded bool, pid int) (identity.Identity, identity.Sources, error) {
	t.Helper()
	opts := []identity.Option{identity.WithConnectRecords(m)}
	if bounded {
		opts = append(opts, identity.WithPids(func() ([]int, error) { return []int{os.Getpid(), pid}, nil }))
	}
	r, err := identity.NewNetlink(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	client, server := ends(s)
	id, err := r.Resolve(context.Background(), server, client)
	return id, r.Sources(), err
}

// connectChild starts bash -c script with args, a script that connects
// to ln, prints its pid and reads its stdin; it returns the child, its
// stdin, the accepted connection and the pid.
func connectChild(t *testing.T, ln net.Listener, bash, script string, args ...string) (*exec.Cmd, io.WriteCloser, net.Conn, int) {
	t.Helper()
	cmd := exec.Command(bash, append([]string{"-c", script}, args...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := acceptOne(t, ln)
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	return cmd, stdin, s, pid
}

// TestOnlyNetns: a program made for one network namespace records its
// connects and none of another namespace's (here: a cookie no namespace
// has, then this test's own).
func TestOnlyNetns(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	probe, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	acceptOne(t, ln)
	own := netnsOf(t, probe)
	for _, tc := range []struct {
		name   string
		cookie uint64
		want   bool
	}{{"other", own + 1, false}, {"own", own, true}} {
		t.Run(tc.name, func(t *testing.T) {
			m := open(t, OnlyNetns(tc.cookie))
			c, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := acceptOne(t, ln)
			client, server := ends(s)
			got, ok, err := m.Take(own, client, server)
			if err != nil || ok != tc.want {
				t.Fatalf("program for netns %d, connect in %d: record %+v ok %v (%v), want ok %v", tc.cookie, own, got, ok, err, tc.want)
			}
		})
	}
}

// TestOnlyPort: a program for one port records the connects to it, in
// either family, and not those to another port.
func TestOnlyPort(t *testing.T) {
	listen := func(network, addr string) net.Listener {
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	watched, other := listen("tcp4", "127.0.0.1:0"), listen("tcp4", "127.0.0.1:0")
	port := uint16(watched.Addr().(*net.TCPAddr).Port)
	watched6 := listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(int(port))))
	m := open(t, OnlyPort(port))
	for _, tc := range []struct {
		name string
		ln   net.Listener
		want bool
	}{{"watched", watched, true}, {"watched-v6", watched6, true}, {"other", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial(tc.ln.Addr().Network(), tc.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := acceptOne(t, tc.ln)
			client, server := ends(s)
			got, ok, err := m.Take(netnsOf(t, c), client, server)
			if err != nil || ok != tc.want {
				t.Fatalf("program for port %d, connect to %s: record %+v ok %v (%v), want ok %v", port, server, got, ok, err, tc.want)
			}
			if ok && got.Pid != os.Getpid() {
				t.Fatalf("record names pid %d, want %d", got.Pid, os.Getpid())
			}
		})
	}
}

// TestPortOf: the port of a TCP listener; an address without one (a unix
// socket's) is refused with its address named.
func TestPortOf(t *testing.T) {
	if p, err := PortOf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3128}); err != nil || p != 3128 {
		t.Fatalf("tcp 127.0.0.1:3128: %d %v", p, err)
	}
	_, err := PortOf(&net.UnixAddr{Name: "/run/proxy.sock", Net: "unix"})
	if err == nil || !strings.Contains(err.Error(), "/run/proxy.sock") {
		t.Fatalf("unix address: %v, want an error naming it", err)
	}
}

// TestExecAfterConnectIsSeen plays a workload that connects with one
// program (bash) and executes another (sleep, which keeps the socket)
// before the boundary's lookup: the kernel recorded what the process ran
// at its connect, so the lookup fails with a ChangedError naming sleep,
// for boundary serve's resolver and a sandbox's (bounded candidates),
// instead of reporting sleep as the connector.
func TestExecAfterConnectIsSeen(t *testing.T) {
	m := open(t)
	if err := errors.Join(m.InodeErr(), m.ImageErr()); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	bash, sleep := tool(t, "bash"), tool(t, "sleep")
	ln, port := loopback(t)
	for _, bounded := range []bool{false, true} {
		cmd, stdin, s, pid := connectChild(t, ln, bash, `exec 3<>/dev/tcp/127.0.0.1/$0; echo $$; read -r _; exec "$1" 30`, port, sleep)
		_, _ = stdin.Write([]byte("go\n"))
		testenv.Eventually(t, 10*time.Second, func() bool {
			exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			return exe == sleep
		}, "the child to execute %s", sleep)
		id, _, err := resolveRecorded(t, m, s, bounded, pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		var ch *identity.ChangedError
		if !errors.As(err, &ch) || ch.Now.Pid != pid || ch.Now.Exe != sleep {
			t.Fatalf("bounded %v: %+v, %v; want a ChangedError naming pid %d running %s", bounded, id, err, pid, sleep)
		}
	}
}

// oneRecord answers one recorded connector, once.
type oneRecord struct {
	c    identity.Connector
	used bool
}

func (o *oneRecord) Take(uint64, netip.AddrPort, netip.AddrPort) (identity.Connector, bool, error) {
	if o.used {
		return identity.Connector{}, false, nil
	}
	o.used = true
	return o.c, true, nil
}

// TestOverlayExecutable: a program run from an overlayfs whose layers are
// on different filesystems is numbered otherwise by the kernel (the
// record) than by stat: its connection is still identified from its
// record (the code and stack addresses are the kernel's on both sides),
// and an exec of another program from the same overlay after the connect
// is still seen.
func TestOverlayExecutable(t *testing.T) {
	m := open(t)
	if err := errors.Join(m.InodeErr(), m.ImageErr()); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	lower, upper := t.TempDir(), t.TempDir()
	if err := unix.Mount("tmpfs", upper, "tmpfs", 0, "size=1m"); err != nil {
		testenv.Unavailable(t, "tmpfs for the overlay's upper layer: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(upper, unix.MNT_DETACH) })
	for _, name := range []string{"bash", "sleep"} {
		b, err := os.ReadFile(tool(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lower, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	merged := t.TempDir()
	for _, d := range []string{"up", "work"} {
		if err := os.Mkdir(filepath.Join(upper, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + filepath.Join(upper, "up") + ",workdir=" + filepath.Join(upper, "work")
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		testenv.Unavailable(t, "overlayfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	bash, sleep := filepath.Join(merged, "bash"), filepath.Join(merged, "sleep")
	ln, port := loopback(t)
	for _, execs := range []bool{false, true} {
		cmd, stdin, s, pid := connectChild(t, ln, bash, `exec 3<>/dev/tcp/127.0.0.1/$0; echo $$; read -r _; exec "$1" 30`, port, sleep)
		client, server := ends(s)
		c, ok, err := m.Take(netnsOf(t, s), client, server)
		if !ok || err != nil {
			t.Fatalf("no record of the overlay's bash: %v", err)
		}
		if now := execOf(t, strconv.Itoa(pid)); now.Dev == c.Exec.Dev && now.Ino == c.Exec.Ino {
			testenv.Unavailable(t, "the kernel numbers the overlay's files as stat does here (%+v)", now)
		}
		want := bash
		if execs {
			_, _ = stdin.Write([]byte("go\n"))
			testenv.Eventually(t, 10*time.Second, func() bool {
				exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
				return exe == sleep
			}, "the child to execute %s", sleep)
			want = sleep
		}
		r, err := identity.NewNetlink(identity.WithConnectRecords(&oneRecord{c: c}))
		if err != nil {
			t.Fatal(err)
		}
		id, err := r.Resolve(context.Background(), server, client)
		_ = r.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		var ch *identity.ChangedError
		switch {
		case !execs && (err != nil || id.Pid != pid || id.Exe != bash):
			t.Fatalf("the overlay's bash: %+v, %v; want it identified from its record", id, err)
		case execs && (!errors.As(err, &ch) || ch.Now.Exe != want):
			t.Fatalf("after an exec of %s: %+v, %v; want a ChangedError naming it", want, id, err)
		}
	}
}
