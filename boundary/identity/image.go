package identity

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Identity bound at accept. A connection's identity is taken when the
// boundary accepts it, before its request is read: the connect record's
// process (whose Exec at connect the kernel recorded: an exec between
// the connect and this lookup is seen exactly), or the socket's owner
// then. When the request is complete, Recheck confirms that each process
// of that identity is the process it was, running the program it ran
// (its Exec), and that no process has taken the socket since. So a
// program that writes part of a request and then executes an allowed
// binary, which completes it, is caught, whichever of the two lookups
// falls between its write and its exec.

// ErrBinaryChanged is wrapped by the errors of a lookup or a Recheck that
// found a process of the connection running another program than the one
// that made it (an exec since its connect, or since the lookup at
// accept), a process of the identity gone, or another process holding
// the socket since: a *ChangedError.
var ErrBinaryChanged = errors.New("binary changed")

// ChangedError is a lookup's or a Recheck's finding that the connection's
// identity changed. Now is the connection's identity as read now, for the
// audit (its Exe is the program running now).
type ChangedError struct {
	Now Identity
	Msg string
}

func (e *ChangedError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, ErrBinaryChanged) hold.
func (e *ChangedError) Unwrap() error { return ErrBinaryChanged }

// Rechecker is a Resolver that can confirm, once a connection's request
// is complete, the identity it gave when the connection was accepted.
type Rechecker interface {
	// Recheck returns nil when every process of id (the owner, and each
	// holder) is the process it was, running the program it ran then,
	// and (with bounded candidates) no other process holds the socket
	// now. Otherwise an error: a *ChangedError (ErrBinaryChanged), or,
	// when it cannot tell, another error (the identity is unavailable).
	Recheck(ctx context.Context, id Identity) error
}

var _ Rechecker = (*Netlink)(nil)

// readExec reads what h's process runs now: its executable's device and
// inode (fstatat through the held directory follows the exe link to the
// file) and the code and stack addresses of its stat (fields 26 and 28;
// 0 for a reader not allowed to see them).
func (h *procHandle) readExec() (Exec, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(h.dir, "exe", &st, 0); err != nil {
		return Exec{}, err
	}
	var buf [1024]byte
	b, err := h.afterComm(buf[:])
	if err != nil {
		return Exec{}, err
	}
	code, stack, err := parseExecAddrs(b)
	if err != nil {
		return Exec{}, err
	}
	return Exec{Dev: st.Dev, Ino: st.Ino, Code: code, Stack: stack}, nil
}

// parseExecAddrs returns startcode and startstack from what follows a
// stat line's comm (from the space before the state, field 3).
func parseExecAddrs(b []byte) (code, stack uint64, err error) {
	f := bytes.Fields(b)
	const codeField, stackField = 26 - 3, 28 - 3
	if len(f) <= stackField {
		return 0, 0, errMalformedStat
	}
	for _, v := range []struct {
		field []byte
		out   *uint64
	}{{f[codeField], &code}, {f[stackField], &stack}} {
		n, ok := uint64(0), len(v.field) > 0 && len(v.field) <= 20
		for _, c := range v.field {
			if c < '0' || c > '9' {
				ok = false
				break
			}
			n = n*10 + uint64(c-'0')
		}
		if !ok {
			return 0, 0, errMalformedStat
		}
		*v.out = n
	}
	return code, stack, nil
}

// exec returns h's Exec, from what events vouch for or read now.
func (t *procTable) exec(h *procHandle) (Exec, error) {
	return vouched(t, h, func(h *procHandle) (*Exec, *bool) { return &h.execC, &h.hasExec }, h.readExec)
}

// sameExec reports whether a and b were read of one exec: the same file
// and, where both show them, the same code and stack addresses (a reader
// the kernel does not let see them reads 0).
func sameExec(a, b Exec) bool {
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return false
	}
	if a.Code != 0 && b.Code != 0 && a.Code != b.Code {
		return false
	}
	return a.Stack == 0 || b.Stack == 0 || a.Stack == b.Stack
}

// describe reads what the identity of h's process holds: its exe, when
// it started and what it runs. The ancestors are read apart.
func (p procFS) describe(h *procHandle) (exe string, start time.Duration, e Exec, err error) {
	if exe, err = p.t.exe(h); err != nil {
		return "", 0, Exec{}, err
	}
	if start, err = p.t.start(h); err != nil {
		return "", 0, Exec{}, err
	}
	if e, err = p.t.exec(h); err != nil {
		return "", 0, Exec{}, err
	}
	return exe, start, e, nil
}

// Recheck implements Rechecker. It drains the process events first (an
// exec's event is queued before the new program runs, so before it could
// have written), then reads each process of id through its handle (what
// events vouch for is not read again), and, with bounded candidates whose
// set has changed since the lookup, scans the new set for the socket. It
// does not consult the fault seam: the lookup at accept did.
func (r *Netlink) Recheck(ctx context.Context, id Identity) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("identity: recheck pid %d: %w", id.Pid, err)
	}
	if ev := r.proc.t.events; ev != nil {
		var w eventWatcher
		if r.cands != nil {
			w = r.cands
		}
		ev.sync(r.proc.t, w, nil)
	}
	var one [1]Holder
	procs := processesOf(id, &one)
	for _, p := range procs {
		if !p.Exec.Known() {
			continue // not read at the lookup (a resolver's fake, or endpoint-only)
		}
		var (
			start time.Duration
			e     Exec
			now   Identity // read only when something changed
		)
		err := r.proc.withHandle(p.Pid, func(h *procHandle) (err error) {
			if start, err = r.proc.t.start(h); err != nil {
				return err
			}
			if e, err = r.proc.t.exec(h); err != nil {
				return err
			}
			if start != p.Start || !sameExec(e, p.Exec) {
				now = Identity{Pid: p.Pid, Ancestors: r.proc.ancestorsOf(h), UID: id.UID, Socket: id.Socket, Start: start, Exec: e}
				now.Exe, err = r.proc.t.exe(h)
			}
			return err
		})
		switch {
		case err != nil && exited(err):
			return &ChangedError{Now: id, Msg: fmt.Sprintf("pid %d (%s) exited before its request was complete", p.Pid, p.Exe)}
		case err != nil:
			return fmt.Errorf("identity: recheck pid %d: %w", p.Pid, err)
		case start != p.Start:
			return &ChangedError{Now: now, Msg: fmt.Sprintf("pid %d (%s) exited before its request was complete; the pid is %s's now", p.Pid, p.Exe, now.Exe)}
		case !sameExec(e, p.Exec):
			return &ChangedError{Now: now, Msg: fmt.Sprintf("pid %d was %s when the connection was accepted and executed %s before the request was complete", p.Pid, p.Exe, now.Exe)}
		}
	}
	if !r.bounded || id.Socket == 0 || id.cands == 0 {
		return nil
	}
	if r.cands != nil {
		if sum, ok := r.cands.keptSum(); ok && sum == id.cands {
			return nil // no process came or went: none can have taken the socket
		}
	}
	pids, sum, err := r.candidates()
	if err != nil {
		return fmt.Errorf("identity: recheck: candidate pids: %w", err)
	}
	if sum == id.cands {
		return nil
	}
	known := make([]int, 0, len(procs))
	for _, p := range procs {
		known = append(known, p.Pid)
	}
	var others []int
	r.scanCandidates(r.newestFirst(pids), id.Socket, -1, func(pid, _ int, held *procHandle) bool {
		r.proc.t.release(held, false)
		if !slices.Contains(known, pid) {
			others = append(others, pid)
		}
		return false
	})
	if len(others) == 0 {
		return nil
	}
	now := r.withHolders(id, others)
	pid, exe := others[0], "exe unknown: it exited since"
	if h := now.Holders; len(h) > len(procs) {
		pid, exe = h[len(procs)].Pid, h[len(procs)].Exe
	}
	return &ChangedError{Now: now, Msg: fmt.Sprintf("pid %d (%s) holds the socket since the connection was accepted", pid, exe)}
}

// processesOf returns id's processes: its holders, or (one holder) its
// owner in *one.
func processesOf(id Identity, one *[1]Holder) []Holder {
	if len(id.Holders) > 0 {
		return id.Holders
	}
	one[0] = Holder{Pid: id.Pid, Exe: id.Exe, Ancestors: id.Ancestors, Start: id.Start, Exec: id.Exec}
	return one[:]
}

// sumPids sums a candidate list whatever its order (never 0): two lists
// of the same pids have the same sum. It sorts pids (every caller's list
// is its own copy).
func sumPids(seed maphash.Seed, pids []int) uint64 {
	slices.Sort(pids)
	var (
		h   maphash.Hash
		buf [8]byte
	)
	h.SetSeed(seed)
	for _, p := range pids {
		binary.NativeEndian.PutUint64(buf[:], uint64(p))
		_, _ = h.Write(buf[:])
	}
	return h.Sum64() | 1
}
