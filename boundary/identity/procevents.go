package identity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// eventsQueueBytes bounds the queue of undrained process events (a few
// hundred events).
const eventsQueueBytes = 256 << 10

// The kernel's process events connector (linux/connector.h, cn_proc.h).
const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1

	procEventNone = 0x0
	procEventFork = 0x1
	procEventExec = 0x2
	procEventComm = 0x200
	procEventExit = 0x80000000

	cnMsgLen     = 20 // idx, val, seq, ack (u32 each), len, flags (u16 each)
	procEventHdr = 16 // what, cpu (u32 each), timestamp (u64)
)

// procEvents listens to the kernel's process events (the proc connector):
// every exec and exit on the host, in the order the kernel queued them.
// The kernel queues an exec's event before the new program runs and an
// exit's before the pid can be reused, so once sync has drained the socket,
// a cached exe or parent that no event contradicts is what a read of /proc
// would return now. A lost event (the socket overflowed) drops every cached
// fact. Only in the initial pid namespace, where the events' pids are the
// proc root's pids, and with CAP_NET_ADMIN; without it every lookup reads
// /proc.
type procEvents struct {
	mu     sync.Mutex // one drain at a time; a lookup waits for a drain in progress
	fd     int
	buf    []byte
	broken bool // the socket failed: nothing is vouched for any more
	// drains counts the drains begun (guarded by mu; read without it by a
	// lookup as it starts): a drain begun after a lookup started has
	// applied every event queued before it, so that lookup needs no drain
	// of its own.
	drains atomic.Uint64
	// forkedLast is the pid of the last task (process or thread) whose fork
	// a drain applied, the pid cursor the events show (/proc/loadavg's
	// last field, without reading it); 0 until a fork was seen and after
	// events were lost.
	forkedLast atomic.Int64
}

// openProcEvents subscribes to process events and checks that their pids
// are numbered like this process's own (the initial pid namespace) by
// renaming the calling thread to its own name and waiting for that event.
func openProcEvents(wait time.Duration, rcvbuf int) (*procEvents, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("identity: proc connector socket: %w", err)
	}
	e := &procEvents{fd: fd, buf: make([]byte, 4096)}
	if err := e.listen(rcvbuf); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := e.selfCheck(wait); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return e, nil
}

func (e *procEvents) listen(rcvbuf int) error {
	if err := unix.Bind(e.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fmt.Errorf("identity: proc connector bind: %w", err)
	}
	// Events are drained only when a connection is looked up, so an idle
	// boundary's queue fills with the host's events: keep it small (its
	// kernel memory is per boundary). An overflow costs one re-read of
	// what was cached, at the next lookup.
	_ = unix.SetsockoptInt(e.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf)
	msg := make([]byte, unix.SizeofNlMsghdr+cnMsgLen+4)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.NLMSG_DONE)
	ne.PutUint32(msg[12:], uint32(os.Getpid()))
	c := msg[unix.SizeofNlMsghdr:]
	ne.PutUint32(c[0:], cnIdxProc)
	ne.PutUint32(c[4:], cnValProc)
	ne.PutUint16(c[16:], 4)
	ne.PutUint32(c[cnMsgLen:], procCnMcastListen)
	if err := unix.Sendto(e.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("identity: proc connector listen: %w", err)
	}
	return nil
}

// selfCheck renames the calling thread to its own name (an event for this
// thread) and waits for that event: it proves events arrive, and that
// their pids are this process's numbering.
func (e *procEvents) selfCheck(wait time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var name [16]byte
	if err := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		return fmt.Errorf("identity: proc connector check: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		return fmt.Errorf("identity: proc connector check: %w", err)
	}
	tid, pid := uint32(unix.Gettid()), uint32(os.Getpid())
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		n, err := recvNoAddr(e.fd, e.buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
			_, _ = unix.Poll(fds, 10)
			continue
		}
		if err != nil {
			return fmt.Errorf("identity: proc connector check: %w", err)
		}
		what, a, b, ok := parseProcEvent(e.buf[:n])
		switch {
		case !ok:
		case what == procEventNone && a != 0:
			return fmt.Errorf("identity: proc connector listen refused: %w", unix.Errno(a))
		case what == procEventComm && a == tid && b == pid:
			return nil
		}
	}
	return errors.New("identity: proc connector: no event for this process (not the initial pid namespace, or no CAP_NET_ADMIN)")
}

// parseProcEvent returns an event's kind and its first two fields: for
// exec, exit and comm the pid (thread id) and tgid; for fork the parent's;
// for the listen ack the error number.
func parseProcEvent(b []byte) (what, a, bb uint32, ok bool) {
	ev, ok := procEventData(b, 8)
	if !ok {
		return 0, 0, 0, false
	}
	ne := binary.NativeEndian
	return ne.Uint32(ev[0:]), ne.Uint32(ev[procEventHdr:]), ne.Uint32(ev[procEventHdr+4:]), true
}

// parseFork returns a fork event's parent tgid and the child's pid and
// tgid (equal for a new process, not for a new thread).
func parseFork(b []byte) (parentTgid, childPid, childTgid uint32, ok bool) {
	ev, ok := procEventData(b, 16)
	if !ok {
		return 0, 0, 0, false
	}
	ne := binary.NativeEndian
	return ne.Uint32(ev[procEventHdr+4:]), ne.Uint32(ev[procEventHdr+8:]), ne.Uint32(ev[procEventHdr+12:]), true
}

// procEventData returns the proc_event of a connector message with at
// least n bytes of event data.
func procEventData(b []byte, n int) ([]byte, bool) {
	ne := binary.NativeEndian
	if len(b) < unix.SizeofNlMsghdr+cnMsgLen+procEventHdr+n {
		return nil, false
	}
	c := b[unix.SizeofNlMsghdr:]
	if ne.Uint32(c[0:]) != cnIdxProc || ne.Uint32(c[4:]) != cnValProc {
		return nil, false
	}
	return c[cnMsgLen:], true
}

// eventWatcher hears of new and ended processes and of lost events
// (procEvents.sync calls it with the drain's lock held).
type eventWatcher interface {
	forked(parentTgid, child int)
	exited(pid int)
	lost()
}

// sync drains every queued event into t: an exec or exit of a process
// forgets what t knew of it (and, for an exit, of its children, which are
// reparented); a lost event forgets everything. When sync returns, every
// event queued before it was called has been applied: by this call, or by
// a drain that began after it was called (lookups that start together
// share one drain). With a mark (drains, taken by mark() earlier, when the
// connection was accepted), every event queued before the mark was taken
// has been applied: a drain begun since will do.
func (e *procEvents) sync(t *procTable, w eventWatcher, mark *Mark) {
	begun := e.drains.Load()
	if mark != nil && mark.drains < begun {
		begun = mark.drains
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.drains.Load() > begun && !e.broken {
		return // a drain begun after this call has completed (drains hold mu)
	}
	e.drains.Add(1)
	for {
		if e.broken || e.fd < 0 {
			e.forkedLast.Store(0)
			t.forgetAll()
			if w != nil {
				w.lost()
			}
			return
		}
		n, err := recvNoAddr(e.fd, e.buf, 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			return
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS): // events were lost; the queue goes on
			e.forkedLast.Store(0)
			t.forgetAll()
			if w != nil {
				w.lost()
			}
			continue
		default:
			e.broken = true
			continue
		}
		what, pid, tgid, ok := parseProcEvent(e.buf[:n])
		if !ok {
			continue
		}
		switch {
		case what == procEventExec:
			t.forget(int(tgid), false)
		case what == procEventExit && pid == tgid: // a thread's exit changes nothing
			t.forget(int(tgid), true)
			if w != nil {
				w.exited(int(tgid))
			}
		case what == procEventFork:
			parent, child, childTgid, ok := parseFork(e.buf[:n])
			if !ok {
				continue
			}
			e.forkedLast.Store(int64(child))
			t.forked(int(parent))               // a child may share its descriptor table
			if w != nil && child == childTgid { // a process, not a thread
				w.forked(int(parent), int(child))
			}
		}
	}
}

func (e *procEvents) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	return err
}
