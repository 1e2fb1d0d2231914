package identity

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
)

func newResolver(tb testing.TB, opts ...Option) *Netlink {
	tb.Helper()
	r, err := NewNetlink(opts...)
	if err != nil {
		tb.Fatalf("NewNetlink: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

func resolve(tb testing.TB, r Resolver, c net.Conn) Identity {
	tb.Helper()
	local, remote := ends(c)
	id, err := r.Resolve(context.Background(), local, remote)
	if err != nil {
		tb.Fatalf("Resolve(%s, %s): %v", local, remote, err)
	}
	return id
}

// checkSelf asserts id names this test process and its parent.
func checkSelf(t *testing.T, id Identity) {
	t.Helper()
	if id.Pid != os.Getpid() || id.Exe != selfExe(t) {
		t.Fatalf("got pid %d exe %q, want %d %q", id.Pid, id.Exe, os.Getpid(), selfExe(t))
	}
	if id.UID != uint32(os.Getuid()) {
		t.Errorf("uid %d, want %d", id.UID, os.Getuid())
	}
	parent, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/exe")
	if err != nil {
		t.Fatalf("parent exe: %v", err)
	}
	if len(id.Ancestors) == 0 || id.Ancestors[0] != parent {
		t.Fatalf("ancestors %q, want first %q", id.Ancestors, parent)
	}
}

func TestResolveSelfIPv4(t *testing.T) {
	r := newResolver(t)
	if r.Mode() != ModeNetlink {
		t.Fatalf("mode %q", r.Mode())
	}
	checkSelf(t, resolve(t, r, pair(t, listen(t, "tcp4", "127.0.0.1:0"))))
}

func TestResolveSelfIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		unavailable(t, "no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	checkSelf(t, resolve(t, newResolver(t), pair(t, ln)))
}

func TestResolveV4MappedAddresses(t *testing.T) {
	r := newResolver(t)
	local, remote := ends(pair(t, listen(t, "tcp4", "127.0.0.1:0")))
	mapped := func(a netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	}
	id, err := r.Resolve(context.Background(), mapped(local), mapped(remote))
	if err != nil {
		t.Fatal(err)
	}
	checkSelf(t, id)
}

func TestResolveChildProcess(t *testing.T) {
	bash, curl := lookPath(t, "bash"), lookPath(t, "curl")
	ln := listen(t, "tcp4", "127.0.0.1:0")
	cmd := exec.Command(bash, "-c", `"$0" -s -o /dev/null -m 10 "http://127.0.0.1:$1/"; exit 0`, curl, port(ln))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id := resolve(t, newResolver(t), accept(t, ln))
	if id.Exe != curl {
		t.Fatalf("exe %q, want %q", id.Exe, curl)
	}
	if len(id.Ancestors) < 2 || id.Ancestors[0] != bash || id.Ancestors[1] != selfExe(t) {
		t.Fatalf("ancestors %q, want [%s %s ...]", id.Ancestors, bash, selfExe(t))
	}
	if ppid, err := newProcFS("/proc", 0).ppid(id.Pid); err != nil || ppid != cmd.Process.Pid {
		t.Fatalf("curl's parent %d (%v), want bash %d", ppid, err, cmd.Process.Pid)
	}
}

func TestResolveProcessChain(t *testing.T) {
	const depth = 50
	ln := listen(t, "tcp4", "127.0.0.1:0")
	conn, leaf := chain(t, ln, depth)
	id := resolve(t, newResolver(t), conn)
	bash := lookPath(t, "bash")
	if id.Pid != leaf || id.Exe != bash {
		t.Fatalf("got pid %d exe %q, want %d %q", id.Pid, id.Exe, leaf, bash)
	}
	want := slices.Repeat([]string{bash}, depth-1)
	if len(id.Ancestors) < depth || !slices.Equal(id.Ancestors[:depth-1], want) || id.Ancestors[depth-1] != selfExe(t) {
		t.Fatalf("ancestors (%d) %q: want %d x bash then %s", len(id.Ancestors), id.Ancestors, depth-1, selfExe(t))
	}
}

func TestUnknownTupleFailsFast(t *testing.T) {
	r := newResolver(t)
	start := time.Now()
	_, err := r.Resolve(context.Background(), netip.MustParseAddrPort("127.0.0.1:9"), netip.MustParseAddrPort("127.0.0.1:1"))
	if !errors.Is(err, ErrSocketNotFound) {
		t.Fatalf("err %v, want ErrSocketNotFound", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("took %v", d)
	}
}

func TestCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	local, remote := ends(pair(t, listen(t, "tcp4", "127.0.0.1:0")))
	if _, err := newResolver(t).Resolve(ctx, local, remote); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestClosedClientHasNoOwner(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := accept(t, ln)
	c.Close() // orphaned FIN_WAIT socket: no inode any more
	local, remote := ends(server)
	_, err = newResolver(t).Resolve(context.Background(), local, remote)
	if !errors.Is(err, ErrNoOwner) && !errors.Is(err, ErrSocketNotFound) {
		t.Fatalf("err %v, want ErrNoOwner or ErrSocketNotFound", err)
	}
}

func TestInjectedFaults(t *testing.T) {
	inj := fault.NewSet()
	r := newResolver(t, WithInjector(inj))
	conn := pair(t, listen(t, "tcp4", "127.0.0.1:0"))
	local, remote := ends(conn)

	inj.Arm(fault.IdentityLookup, fault.Rule{Kind: fault.KindError, Count: 1})
	if _, err := r.Resolve(context.Background(), local, remote); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("err %v, want injected", err)
	}
	checkSelf(t, resolve(t, r, conn)) // count 1: disarmed again

	inj.Arm(fault.IdentityLookup, fault.Rule{Kind: fault.KindPanic, Count: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("injected panic did not propagate")
			}
		}()
		r.Resolve(context.Background(), local, remote)
	}()
	if got := inj.Fired(fault.IdentityLookup); got != 2 {
		t.Fatalf("fired %d, want 2", got)
	}
}

func TestCandidatePids(t *testing.T) {
	conn := pair(t, listen(t, "tcp4", "127.0.0.1:0"))
	local, remote := ends(conn)
	others := newResolver(t, WithPids(func() ([]int, error) { return []int{1}, nil }))
	if _, err := others.Resolve(context.Background(), local, remote); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("err %v, want ErrNoOwner", err)
	}
	boom := errors.New("boom")
	failing := newResolver(t, WithPids(func() ([]int, error) { return nil, boom }))
	if _, err := failing.Resolve(context.Background(), local, remote); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	self := newResolver(t, WithPids(func() ([]int, error) { return []int{1, os.Getpid()}, nil }), WithProcRoot("/proc"))
	checkSelf(t, resolve(t, self, conn))
}

func TestStaleCacheEntryIsNotTrusted(t *testing.T) {
	r := newResolver(t)
	conn := pair(t, listen(t, "tcp4", "127.0.0.1:0"))
	local, remote := ends(conn)
	d, err := r.diag.lookup(remote, local)
	if err != nil {
		t.Fatal(err)
	}
	// A wrong owner for this inode (pid 1's stdin) must fail validation.
	r.cache.put(map[uint32]fdRef{d.inode: {pid: 1, fd: 0}})
	checkSelf(t, resolve(t, r, conn))
	ref, ok := r.cache.get(d.inode)
	if !ok || ref.pid != os.Getpid() {
		t.Fatalf("cache after scan: %+v %v", ref, ok)
	}
	checkSelf(t, resolve(t, r, conn)) // served from the validated cache
}

func TestConcurrentResolve(t *testing.T) {
	r := newResolver(t)
	ln := listen(t, "tcp4", "127.0.0.1:0")
	conns := make([]net.Conn, 16)
	for i := range conns {
		conns[i] = pair(t, ln)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for _, c := range conns {
		wg.Go(func() {
			local, remote := ends(c)
			id, err := r.Resolve(context.Background(), local, remote)
			if err == nil && id.Pid != os.Getpid() {
				err = errors.New("wrong pid " + strconv.Itoa(id.Pid))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestClosedResolver(t *testing.T) {
	r, err := NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	local, remote := ends(pair(t, listen(t, "tcp4", "127.0.0.1:0")))
	if _, err := r.Resolve(context.Background(), local, remote); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("err %v, want net.ErrClosed", err)
	}
}

func TestDiagFDMustBeSockDiag(t *testing.T) {
	p := make([]int, 2)
	if err := unix.Pipe2(p, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[1])
	if _, err := NewNetlink(WithDiagFD(p[0])); err == nil {
		t.Fatal("a pipe was accepted as sock_diag socket")
	}
	// The refused descriptor was the resolver's to close: the pipe has no
	// reader left.
	if _, err := unix.Write(p[1], []byte{1}); !errors.Is(err, unix.EPIPE) {
		_ = unix.Close(p[0])
		t.Fatalf("write to the pipe: %v, want EPIPE (NewNetlink left the refused descriptor open)", err)
	}
}

// netnsConn creates, in a new network namespace, a sock_diag socket and a
// loopback connection.
func netnsConn(t *testing.T) (diagFD int, server net.Conn) {
	ns := testenv.NewNetns(t)
	var (
		ln net.Listener
		c  net.Conn
	)
	diagFD = -1
	err := ns.Run(func() (err error) {
		if diagFD, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
		c, err = net.Dial("tcp4", ln.Addr().String())
		return err
	})
	if err != nil {
		t.Fatalf("network namespace setup: %v", err)
	}
	t.Cleanup(func() { c.Close(); ln.Close() })
	return diagFD, accept(t, ln)
}

func TestDiagFDFromOtherNetworkNamespace(t *testing.T) {
	requireRoot(t)
	fd, server := netnsConn(t)
	local, remote := ends(server)
	host := newResolver(t)
	if _, err := host.Resolve(context.Background(), local, remote); !errors.Is(err, ErrSocketNotFound) {
		t.Fatalf("host namespace resolver: err %v, want ErrSocketNotFound", err)
	}
	checkSelf(t, resolve(t, newResolver(t, WithDiagFD(fd)), server))
}

func TestNone(t *testing.T) {
	var r Resolver = None{}
	id, err := r.Resolve(context.Background(), netip.AddrPort{}, netip.AddrPort{})
	if err != nil || id.Pid != 0 || id.Exe != "" || id.Ancestors != nil || r.Mode() != ModeNone {
		t.Fatalf("None: %+v %v %q", id, err, r.Mode())
	}
}

func TestRequestLayout(t *testing.T) {
	var b [diagRequestLen]byte
	packRequest(b[:], 7, unix.AF_INET6, netip.MustParseAddrPort("[::1]:5555"), netip.MustParseAddrPort("[::1]:3128"))
	ne := binary.NativeEndian
	if len(b) != 72 || ne.Uint32(b[0:]) != 72 || ne.Uint16(b[4:]) != unix.SOCK_DIAG_BY_FAMILY ||
		ne.Uint16(b[6:]) != unix.NLM_F_REQUEST || ne.Uint32(b[8:]) != 7 {
		t.Fatalf("header % x", b[:16])
	}
	r := b[16:]
	if r[0] != unix.AF_INET6 || r[1] != unix.IPPROTO_TCP || ne.Uint32(r[4:])&(1<<tcpListen) != 0 {
		t.Fatalf("req % x", r[:8])
	}
	if binary.BigEndian.Uint16(r[8:]) != 5555 || binary.BigEndian.Uint16(r[10:]) != 3128 || r[27] != 1 || r[43] != 1 {
		t.Fatalf("sockid % x", r[8:56])
	}
	if ne.Uint32(r[48:]) != ^uint32(0) || ne.Uint32(r[52:]) != ^uint32(0) {
		t.Fatalf("cookie % x", r[48:56])
	}
}

func TestSocketInodeParse(t *testing.T) {
	for link, want := range map[string]uint32{"socket:[1234]": 1234, "socket:[]": 0, "pipe:[5]": 0, "socket:[x]": 0, "/dev/null": 0} {
		got, ok := socketInode([]byte(link))
		if got != want || ok != (want != 0) {
			t.Errorf("%q: %d %v", link, got, ok)
		}
	}
}

func TestNewestFirstAcrossWrap(t *testing.T) {
	pids := []int{1, 300, 30000, 50, 31000, 200}
	newestFirst(pids, 250) // 250 allocated last: 200, 50, 1 are newest, then 31000, 30000, 300
	if want := []int{200, 50, 1, 31000, 30000, 300}; !slices.Equal(pids, want) {
		t.Fatalf("%v, want %v", pids, want)
	}
	newestFirst(pids, 0)
	if want := []int{31000, 30000, 300, 200, 50, 1}; !slices.Equal(pids, want) {
		t.Fatalf("%v, want %v", pids, want)
	}
}

func TestOwnerHintsFirst(t *testing.T) {
	c := newOwnerCache()
	c.owned(5)
	c.owned(9)
	if got, want := c.order([]int{10, 9, 7, 5, 1}), []int{9, 5, 10, 7, 1}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if got, want := c.order([]int{10, 7}), []int{10, 7}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// TestStopAtEndsTheWalk: with WithStopAt(bash's pid) the ancestors of curl
// (child of bash, grandchild of this test) end below bash: nothing above
// the stop pid (in a sandbox, the host above its init) is reported.
func TestStopAtEndsTheWalk(t *testing.T) {
	bash, curl := lookPath(t, "bash"), lookPath(t, "curl")
	ln := listen(t, "tcp4", "127.0.0.1:0")
	cmd := exec.Command(bash, "-c", `"$0" -s -o /dev/null -m 10 "http://127.0.0.1:$1/" & wait; exit 0`, curl, port(ln))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id := resolve(t, newResolver(t, WithStopAt(cmd.Process.Pid)), accept(t, ln))
	if id.Exe != curl || len(id.Ancestors) != 0 {
		t.Fatalf("exe %q ancestors %q: want curl and no ancestors (its parent is the stop pid)", id.Exe, id.Ancestors)
	}
}

// TestSharedSocketHolders: a socket inherited by a child is held by two
// processes; with a bounded candidate set every holder is reported (the
// newest found first), each with its own binary.
func TestSharedSocketHolders(t *testing.T) {
	server, child, sleep := sharedWithChild(t)
	pids := func() ([]int, error) { return []int{os.Getpid(), child.Process.Pid}, nil }
	id := resolve(t, newResolver(t, WithPids(pids)), server)
	if len(id.Holders) != 2 || id.Holders[0].Pid != id.Pid || id.Holders[0].Exe != id.Exe {
		t.Fatalf("holders %+v (identity pid %d %s), want both processes, the identity first", id.Holders, id.Pid, id.Exe)
	}
	got := map[int]string{}
	for _, h := range id.Holders {
		got[h.Pid] = h.Exe
	}
	if got[os.Getpid()] != selfExe(t) || got[child.Process.Pid] != sleep {
		t.Fatalf("holders %v, want %d=%s and %d=%s", got, os.Getpid(), selfExe(t), child.Process.Pid, sleep)
	}
	// Unbounded candidates (the standalone boundary on the host): one owner.
	if all := resolve(t, newResolver(t), server); all.Holders != nil {
		t.Fatalf("holders without WithPids: %+v", all.Holders)
	}
	// Once the child is gone, one holder: no list.
	_ = child.Process.Kill()
	_ = child.Wait()
	if one := resolve(t, newResolver(t, WithPids(pids)), server); one.Holders != nil || one.Pid != os.Getpid() {
		t.Fatalf("after the child exited: %+v", one)
	}
}

// TestSharedSocketOwnerNewestAcrossWrap: of a socket's holders, the owner
// is the one whose pid was allocated last, by the pid cursor and not by
// the larger number: after a wrap-around the newer process has the
// smaller pid (CI met this: the child 351, the test process 32678).
func TestSharedSocketOwnerNewestAcrossWrap(t *testing.T) {
	server, child, _ := sharedWithChild(t)
	self, kid := os.Getpid(), child.Process.Pid
	pids := func() ([]int, error) { return []int{self, kid}, nil }
	low, high := min(self, kid), max(self, kid)
	for _, tc := range []struct {
		name   string
		cursor int
		want   int
	}{
		{"no wrap since both", high, high},
		{"the larger pid allocated before a wrap", low, low},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResolver(t, WithPids(pids))
			r.proc.cursor = func([]int) int { return tc.cursor }
			id := resolve(t, r, server)
			if id.Pid != tc.want || len(id.Holders) != 2 || id.Holders[0].Pid != tc.want {
				t.Fatalf("cursor %d: owner %d holders %+v, want %d (allocated last) first of both", tc.cursor, id.Pid, id.Holders, tc.want)
			}
		})
	}
}

// TestTrustedNeverScanned: the trusted process (a sandbox's init) is not
// read for holders. A socket the trusted process and a child share names
// only the child; a socket only the trusted process holds has no owner
// (denied), so trusting a process never lends it a workload's permission.
func TestTrustedNeverScanned(t *testing.T) {
	server, child, sleep := sharedWithChild(t)
	pids := func() ([]int, error) { return []int{os.Getpid(), child.Process.Pid}, nil }
	id := resolve(t, newResolver(t, WithPids(pids), WithTrusted(os.Getpid())), server)
	if id.Pid != child.Process.Pid || id.Exe != sleep || id.Holders != nil {
		t.Fatalf("with this process trusted: %+v, want only the child %d (%s)", id, child.Process.Pid, sleep)
	}
	// Only the trusted process holds it now: no owner.
	_ = child.Process.Kill()
	_ = child.Wait()
	local, remote := ends(server)
	r := newResolver(t, WithPids(pids), WithTrusted(os.Getpid()))
	if got, err := r.Resolve(context.Background(), local, remote); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("socket held by the trusted process only: %+v, %v; want ErrNoOwner", got, err)
	}
	// Not trusted, the same resolver setup names this process.
	if id := resolve(t, newResolver(t, WithPids(pids)), server); id.Pid != os.Getpid() {
		t.Fatalf("untrusted: %+v", id)
	}
}

// sharedWithChild connects this process to a listener and gives the
// client socket to a sleeping child as well. It returns the accepted end,
// the child and its binary.
func sharedWithChild(t *testing.T) (net.Conn, *exec.Cmd, string) {
	t.Helper()
	sleep := lookPath(t, "sleep")
	ln := listen(t, "tcp4", "127.0.0.1:0")
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server := accept(t, ln)
	f, err := client.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(sleep, "30")
	child.ExtraFiles = []*os.File{f}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	return server, child, sleep
}
