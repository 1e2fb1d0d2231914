package supervisor

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy"
)

// TestSandboxIdentityUsesRecords: the resolver the supervisor makes for a
// sandbox's boundary (sandboxIdentity, as startBoundary calls it)
// identifies a connection to the proxy from the connect the kernel
// recorded in the sandbox's network namespace, not by a silent fall back
// to sock_diag, and says at its close how each connection was identified.
// The sandbox here is a network namespace of the test's own and this
// process its one candidate.
func TestSandboxIdentityUsesRecords(t *testing.T) {
	ns := testenv.NewNetns(t)
	diag := -1
	var px net.Listener
	if err := ns.Run(func() (err error) {
		if diag, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG); err != nil {
			return err
		}
		px, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("the sandbox's sockets: %v", err)
	}
	defer px.Close()
	var logs testenv.Buffer
	self := os.Getpid()
	id, closeOnce, err := sandboxIdentity(diag, px, func() ([]int, error) { return []int{self}, nil }, 1, identity.TamperPolicy{}, fault.Nop{}, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	closeID := sync.OnceFunc(closeOnce)
	defer closeID()
	if !strings.Contains(logs.String(), "the sandbox's connects recorded in the kernel") {
		testenv.Unavailable(t, "the sandbox's connects are not recorded here: %s", logs.String())
	}

	var c net.Conn
	if err := ns.Run(func() (err error) {
		c, err = net.Dial("tcp4", px.Addr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = px.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	s, err := px.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	local, remote := s.LocalAddr().(*net.TCPAddr).AddrPort(), s.RemoteAddr().(*net.TCPAddr).AddrPort()
	got, err := id.Resolve(context.Background(), local, remote)
	if err != nil {
		t.Fatalf("resolve %s -> %s: %v", remote, local, err)
	}
	var st unix.Stat_t
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var statErr error
	if err := raw.Control(func(fd uintptr) { statErr = unix.Fstat(int(fd), &st) }); err != nil || statErr != nil {
		t.Fatalf("fstat of the client socket: %v %v", err, statErr)
	}
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got.Pid != self || got.Socket != uint32(st.Ino) || got.Exe != exe || got.Holders != nil {
		t.Fatalf("identity %+v, want pid %d, socket %d, exe %s, one holder", got, self, st.Ino, exe)
	}
	if src := id.Sources(); src.Records != 1 || src.SockDiag != 0 {
		t.Fatalf("identified %+v, want the one connection from its record (the supervisor fell back to sock_diag)", src)
	}
	closeID()
	if !strings.Contains(logs.String(), `"records":true,"from_records":1,"through_sock_diag":0,"message":"identity: connections identified"`) {
		t.Fatalf("the close does not say how the connections were identified:\n%s", logs.String())
	}
}

// TestTamperPolicy: a sandbox's boundary vouches for code mapped from the
// policy's and the baseline's read-only paths, and never for code from a
// path the workload can write: the policy's read_write paths, the
// baseline's (the workspace and the tmpfs mounts, even where the policy
// narrows one to read-only), /run, and the working directory with
// include_workdir; the tracer is read at every connection only where the
// workload may ptrace.
func TestTamperPolicy(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte(`version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/opt/tools, /tmp]
  read_write: [/data]
`))
	if err != nil {
		t.Fatal(err)
	}
	tp := tamperPolicy(pol, "/work", true)
	for _, p := range []string{"/opt/tools", "/usr", "/etc"} {
		if !slices.Contains(tp.ReadOnly, p) {
			t.Errorf("read-only %v lacks %s", tp.ReadOnly, p)
		}
	}
	for _, p := range []string{"/data", "/sandbox", "/tmp", "/var/tmp", "/dev/shm", "/run", "/work"} {
		if !slices.Contains(tp.Writable, p) {
			t.Errorf("writable %v lacks %s", tp.Writable, p)
		}
	}
	if !tp.TracerEveryCall {
		t.Error("a traceable workload's tracer is not read at every connection")
	}
	plain, err := policy.Parse("p.yaml", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if tp := tamperPolicy(plain, "/work", false); slices.Contains(tp.Writable, "/work") || tp.TracerEveryCall || !slices.Contains(tp.Writable, "/sandbox") {
		t.Errorf("without filesystem_policy: %+v", tp)
	}
}
