package identity

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Connector is the process the kernel recorded connecting a socket: its
// tgid and uid (as the host numbers them), when (CLOCK_BOOTTIME), the
// socket's inode (0: not recorded) and what the process ran then (the
// zero Exec: not recorded).
type Connector struct {
	Pid   int
	UID   uint32
	At    time.Duration
	Inode uint32
	Exec  Exec
}

// Exec identifies what one exec of a process runs: its executable file
// (the device as stat(2) numbers it, and the inode) and where that exec
// placed the program's code and its stack, which the kernel randomizes
// anew at every exec (unless the host turned address space randomization
// off). Two reads of one process that give the same Exec saw the same
// program: a different one (another file) exactly, the same one run again
// up to a collision of its randomized addresses. The zero Exec means "not
// known".
type Exec struct {
	Dev, Ino    uint64
	Code, Stack uint64
}

// Known reports whether e was read.
func (e Exec) Known() bool { return e.Ino != 0 }

// ConnectRecords is the seam to connects recorded in the kernel
// (connmap.Map; fakes in tests). Take returns and forgets the connector of
// the connection from client to server in the network namespace whose
// cookie is netns; ok is false when none was recorded.
type ConnectRecords interface {
	Take(netns uint64, client, server netip.AddrPort) (c Connector, ok bool, err error)
}

// WithConnectRecords lets lookups start from the connector the kernel
// recorded at connect time instead of sock_diag and the fd scan. When
// every process of the host is a candidate (boundary serve), the connector
// is the owner. With bounded candidates (a sandbox) the record must carry
// the socket's inode and name a candidate: the connector is the owner, and
// every other candidate is still scanned for the socket, as without
// records, so every holder is found. A record is trusted only for a
// process that still lives and started before the connect (so a pid reused
// since is never reported); anything else falls back to sock_diag and
// /proc in the same pass. Records are not used with WithProcRoot (they
// number processes as the host does).
func WithConnectRecords(rec ConnectRecords) Option {
	return func(c *config) { c.records = rec }
}

// userHZ is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux architecture Go supports.
const userHZ = 100

// fromRecord identifies the connection by its connect record; ok is false
// when there is none or it cannot be trusted (the caller then asks
// sock_diag and /proc). A record whose process runs another program now
// than when it connected (its Exec differs: an exec since) is a
// *ChangedError, never a fall back: the process found through sock_diag
// would be the same one, running the program that did not connect.
func (r *Netlink) fromRecord(client, server netip.AddrPort) (Identity, bool, error) {
	c, ok, err := r.records.Take(r.netns, client, server)
	if err != nil || !ok {
		return Identity{}, false, nil
	}
	var id Identity
	if r.bounded {
		id, ok = r.fromRecordHeld(c)
	} else {
		id, ok = r.connector(c)
	}
	if !ok {
		return Identity{}, false, nil
	}
	if c.Exec.Known() && !sameExec(c.Exec, id.Exec) && !r.sameAddresses(c.Exec, id) {
		return Identity{}, false, &ChangedError{Now: id, Msg: fmt.Sprintf("pid %d executed %s after it connected: the program that made the connection is not the one running now", id.Pid, id.Exe)}
	}
	return id, true, nil
}

// sameAddresses reports whether a record's Exec and id's, whose files
// differ, were taken of one exec all the same: stat may number an
// executable otherwise than the kernel does (a file of an overlayfs whose
// layers are on different filesystems), while the code and stack
// addresses are the kernel's own on both sides, and differ between two
// execs wherever the address space is randomized: the host's
// kernel.randomize_va_space, and the process's personality without
// ADDR_NO_RANDOMIZE (the workload's seccomp filter refuses setting it).
// Read only when the files differ.
func (r *Netlink) sameAddresses(rec Exec, id Identity) bool {
	if rec.Code == 0 || rec.Stack == 0 || rec.Code != id.Exec.Code || rec.Stack != id.Exec.Stack {
		return false
	}
	b, err := os.ReadFile("/proc/sys/kernel/randomize_va_space")
	if err != nil || strings.TrimSpace(string(b)) == "0" {
		return false
	}
	b, err = os.ReadFile(r.proc.path(id.Pid, "personality"))
	if err != nil {
		return false
	}
	pers, err := strconv.ParseUint(strings.TrimSpace(string(b)), 16, 32)
	return err == nil && pers&addrNoRandomize == 0
}

// addrNoRandomize is ADDR_NO_RANDOMIZE (linux/personality.h).
const addrNoRandomize = 0x0040000

// connector identifies the recorded connector: its exe, ancestors, start
// and what it runs now, read through a handle on a process that lives
// and started before the connect.
func (r *Netlink) connector(c Connector) (Identity, bool) {
	var id Identity
	err := r.proc.withHandle(c.Pid, func(h *procHandle) error {
		exe, start, ex, err := r.proc.describe(h)
		if err != nil {
			return err
		}
		if start > c.At {
			return fmt.Errorf("pid %d started at %s, after the connect at %s: %w", c.Pid, start, c.At, errOwnerGone)
		}
		id = Identity{Pid: c.Pid, Exe: exe, Ancestors: r.proc.ancestorsOf(h), UID: c.UID, Socket: c.Inode, Start: start, Exec: ex}
		return nil
	})
	return id, err == nil
}

// fromRecordHeld identifies a connection among bounded candidates (a
// sandbox's processes) from its record: the connector, a candidate other
// than the trusted process, is the owner, and every other candidate is
// scanned for the recorded inode as holders does (the trusted process and
// quiet ones without it are not read), so a socket inherited or passed
// since the connect is found in each process that holds it. ok is false
// without an inode or for a connector that is no candidate: the caller
// then asks sock_diag.
func (r *Netlink) fromRecordHeld(c Connector) (Identity, bool) {
	if c.Inode == 0 || (c.Pid == r.trusted && c.Pid != 0) {
		return Identity{}, false
	}
	pids, sum, err := r.candidates()
	if err != nil || !slices.Contains(pids, c.Pid) {
		return Identity{}, false
	}
	id, ok := r.connector(c)
	if !ok {
		return Identity{}, false
	}
	id.cands = sum
	// Descending, not by the pid cursor (holders): the order only lists
	// the other holders, the connector being the owner.
	slices.Sort(pids)
	slices.Reverse(pids)
	var others []int
	r.scanCandidates(pids, c.Inode, c.Pid, func(pid, _ int, held *procHandle) bool {
		r.proc.t.release(held, false)
		others = append(others, pid)
		return false
	})
	r.cache.owned(c.Pid)
	r.proc.t.resolved.mark(c.Inode)
	return r.withHolders(id, others), true
}

// start returns when h's process started (CLOCK_BOOTTIME, to the tick):
// read once per handle, as it never changes for the process a handle is
// bound to.
func (t *procTable) start(h *procHandle) (time.Duration, error) {
	t.mu.Lock()
	s, ok := h.startC, h.hasStart
	t.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := h.start()
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	h.startC, h.hasStart = s, true
	t.mu.Unlock()
	return s, nil
}

// start reads starttime, the 22nd field of the held stat file.
func (h *procHandle) start() (time.Duration, error) {
	var buf [1024]byte
	b, err := h.afterComm(buf[:])
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(b) // state is field 3
	const startField = 22 - 3
	if len(f) <= startField {
		return 0, errMalformedStat
	}
	ticks, ok := atoiBytes(f[startField])
	if !ok {
		return 0, errMalformedStat
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}
