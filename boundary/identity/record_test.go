package identity

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeRecords is a ConnectRecords that answers what the test put in it
// and remembers what it was asked.
type fakeRecords struct {
	mu    sync.Mutex
	c     Connector
	ok    bool
	err   error
	asked []netip.AddrPort // client, server of each Take
	netns []uint64
}

func (f *fakeRecords) Take(netns uint64, client, server netip.AddrPort) (Connector, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, client, server)
	f.netns = append(f.netns, netns)
	return f.c, f.ok, f.err
}

func (f *fakeRecords) takes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.netns)
}

func bootTime(tb testing.TB) time.Duration {
	tb.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

func ownNetns(tb testing.TB) uint64 {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestRecordNamesTheConnector: with a connect record, the lookup asks the
// record with the connection's ends and this network namespace, and
// reports the recorded process (its exe and ancestors read from /proc)
// without a sock_diag request (Socket is the record's: 0 here).
func TestRecordNamesTheConnector(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	conn, leaf := chain(t, ln, 2)
	rec := &fakeRecords{c: Connector{Pid: leaf, UID: 4242, At: bootTime(t)}, ok: true}
	id := resolve(t, newResolver(t, WithConnectRecords(rec)), conn)
	bash := lookPath(t, "bash")
	if id.Pid != leaf || id.Exe != bash || id.UID != 4242 || id.Socket != 0 {
		t.Fatalf("got pid %d exe %q uid %d socket %d, want %d %q 4242 and no sock_diag", id.Pid, id.Exe, id.UID, id.Socket, leaf, bash)
	}
	if len(id.Ancestors) < 2 || id.Ancestors[0] != bash || id.Ancestors[1] != selfExe(t) {
		t.Fatalf("ancestors %q, want [%s %s ...]", id.Ancestors, bash, selfExe(t))
	}
	local, remote := ends(conn)
	if rec.takes() != 1 || rec.asked[0] != remote || rec.asked[1] != local || rec.netns[0] != ownNetns(t) {
		t.Fatalf("asked %v in netns %v, want [%s %s] in %d", rec.asked, rec.netns, remote, local, ownNetns(t))
	}
}

// TestUntrustedRecordFallsBack plays a workload that connects, exits and
// lets its pid be reused by a process the policy would allow: the record
// names a live process that started after the connect. That process is
// never reported; nor is a dead one, and a failing record is not an
// error: the lookup asks sock_diag and /proc and finds the real owner.
func TestUntrustedRecordFallsBack(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	conn, leaf := chain(t, ln, 1)
	connected := bootTime(t)
	// The stand-in for the reused pid: started after the "connect", by at
	// least one tick of /proc's clock.
	time.Sleep(30 * time.Millisecond)
	sleep := exec.Command(lookPath(t, "sleep"), "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	dead := exec.Command(lookPath(t, "true"))
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  *fakeRecords
	}{
		{"a pid started after the connect", &fakeRecords{c: Connector{Pid: sleep.Process.Pid, At: connected}, ok: true}},
		{"an exited pid", &fakeRecords{c: Connector{Pid: dead.Process.Pid, At: bootTime(t)}, ok: true}},
		{"no record", &fakeRecords{}},
		{"the record fails", &fakeRecords{err: errors.New("map gone")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := resolve(t, newResolver(t, WithConnectRecords(tc.rec)), conn)
			if id.Pid != leaf || id.Socket == 0 {
				t.Fatalf("got pid %d (socket %d), want the owner %d found by sock_diag", id.Pid, id.Socket, leaf)
			}
			if tc.rec.takes() != 1 {
				t.Fatalf("record asked %d times, want 1", tc.rec.takes())
			}
		})
	}
}

// TestRecordHeldFindsEveryHolder plays a workload that connects with an
// allowed binary and hands the socket to another process (here: a child
// inherits it) that will write on it. A sandbox's resolver (bounded
// candidates) that starts from the connect record still scans every other
// candidate for the recorded inode, so both holders are reported, the
// connector first. The record is used: the connector, the older process,
// is the owner, where sock_diag and the scan name the newest holder.
// Records it cannot use fall back to sock_diag: no inode, a connector that
// is no candidate, the trusted process.
func TestRecordHeldFindsEveryHolder(t *testing.T) {
	server, child, sleep := sharedWithChild(t)
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/fd/3", child.Process.Pid), &st); err != nil {
		t.Fatal(err)
	}
	inode := uint32(st.Ino)
	self := os.Getpid()
	pids := func() ([]int, error) { return []int{self, child.Process.Pid}, nil }
	rec := &fakeRecords{c: Connector{Pid: self, UID: 4242, At: bootTime(t), Inode: inode}, ok: true}
	id := resolve(t, newResolver(t, WithPids(pids), WithConnectRecords(rec)), server)
	if id.Pid != self || id.UID != 4242 || id.Socket != inode || rec.takes() != 1 {
		t.Fatalf("got pid %d uid %d socket %d (%d takes), want the recorded connector %d, uid 4242, socket %d", id.Pid, id.UID, id.Socket, rec.takes(), self, inode)
	}
	got := map[int]string{}
	for _, h := range id.Holders {
		got[h.Pid] = h.Exe
	}
	if len(id.Holders) != 2 || id.Holders[0].Pid != self || got[self] != selfExe(t) || got[child.Process.Pid] != sleep {
		t.Fatalf("holders %+v, want %d=%s first and %d=%s", id.Holders, self, selfExe(t), child.Process.Pid, sleep)
	}
	for _, tc := range []struct {
		name string
		rec  Connector
		opts []Option
	}{
		{"no inode", Connector{Pid: self, At: bootTime(t)}, nil},
		{"a connector that is no candidate", Connector{Pid: 1, At: bootTime(t), Inode: inode}, nil},
		{"the trusted process", Connector{Pid: self, At: bootTime(t), Inode: inode}, []Option{WithTrusted(self)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &fakeRecords{c: tc.rec, ok: true}
			id := resolve(t, newResolver(t, append(tc.opts, WithPids(pids), WithConnectRecords(rec))...), server)
			if id.Pid != child.Process.Pid || id.UID == 4242 || rec.takes() != 1 {
				t.Fatalf("got pid %d uid %d (%d takes), want the newest holder %d found by sock_diag", id.Pid, id.UID, rec.takes(), child.Process.Pid)
			}
		})
	}
}

// TestStartTimeParse reads this process's start from its stat file and
// checks it against the boot clock.
func TestStartTimeParse(t *testing.T) {
	tbl := newProcTable("/proc")
	h, err := tbl.acquire(unix.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.release(h, false)
	s, err := tbl.start(h)
	if err != nil {
		t.Fatal(err)
	}
	if now := bootTime(t); s <= 0 || s > now {
		t.Fatalf("start %s, want in (0, %s]", s, now)
	}
	// A child started now starts after this process.
	c := exec.Command(lookPath(t, "sleep"), "5")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	time.Sleep(20 * time.Millisecond)
	ch, err := tbl.acquire(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.release(ch, false)
	cs, err := tbl.start(ch)
	if err != nil || cs < s {
		t.Fatalf("child start %s (%v), want >= %s", cs, err, s)
	}
}
