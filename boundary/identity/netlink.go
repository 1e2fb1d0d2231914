package identity

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/stockade-dev/stockade/chaos/fault"
)

// Retry bounds for the races of a just-made connection (owner forking,
// exiting or passing the fd on while it is looked up).
const (
	retryWindow  = 2 * time.Millisecond
	retryBackoff = 100 * time.Microsecond
)

// Option configures a Netlink resolver.
type Option func(*config)

type config struct {
	diagFD   int
	pids     func() ([]int, error)
	procRoot string
	stopAt   int
	inj      fault.Injector
}

// WithDiagFD makes the resolver use an existing NETLINK_SOCK_DIAG socket (for
// example one created inside a sandbox's network namespace) instead of
// creating one in the current namespace. The resolver takes ownership of fd
// and closes it on Close.
func WithDiagFD(fd int) Option { return func(c *config) { c.diagFD = fd } }

// WithPids restricts the candidate owners to the pids it returns, numbered
// as in the proc root (default: every process in the proc root).
func WithPids(f func() ([]int, error)) Option { return func(c *config) { c.pids = f } }

// WithStopAt ends every ancestor walk below pid (a sandbox's init): the
// ancestors are the sandbox's processes, never the host's above it.
func WithStopAt(pid int) Option { return func(c *config) { c.stopAt = pid } }

// WithProcRoot reads processes under root instead of /proc.
func WithProcRoot(root string) Option { return func(c *config) { c.procRoot = root } }

// WithInjector sets the fault seam consulted at fault.IdentityLookup.
func WithInjector(inj fault.Injector) Option { return func(c *config) { c.inj = inj } }

// Netlink resolves peer identity through sock_diag and procfs. It is safe for
// concurrent use.
type Netlink struct {
	diag  *diagConn
	proc  procFS
	pids  func() ([]int, error)
	inj   fault.Injector
	cache *ownerCache
	// allProcs: every process is a candidate (no WithPids), so recent
	// owners can be scanned before listing /proc.
	allProcs bool
}

var _ Resolver = (*Netlink)(nil)
var _ Resolver = None{}

// NewNetlink returns a Netlink resolver. Close it when done.
func NewNetlink(opts ...Option) (*Netlink, error) {
	c := config{diagFD: -1, procRoot: "/proc", inj: fault.Nop{}}
	for _, o := range opts {
		o(&c)
	}
	var (
		d   *diagConn
		err error
	)
	if c.diagFD >= 0 {
		d, err = adoptDiag(c.diagFD)
	} else {
		d, err = openDiag()
	}
	if err != nil {
		return nil, err
	}
	r := &Netlink{diag: d, proc: procFS{root: c.procRoot, stopAt: c.stopAt}, pids: c.pids, inj: c.inj, cache: newOwnerCache()}
	if r.pids == nil {
		r.allProcs = true
		r.pids = r.proc.allPids
	}
	return r, nil
}

// Close releases the sock_diag socket.
func (r *Netlink) Close() error {
	if err := r.diag.close(); err != nil {
		return fmt.Errorf("identity: close sock_diag socket: %w", err)
	}
	return nil
}

// Mode returns ModeNetlink.
func (r *Netlink) Mode() string { return ModeNetlink }

// Resolve implements Resolver. It consults the fault seam first (an injected
// panic propagates to the caller), then retries briefly while the socket or
// its owner is not found.
func (r *Netlink) Resolve(ctx context.Context, local, remote netip.AddrPort) (Identity, error) {
	if err := r.inj.Inject(fault.IdentityLookup); err != nil {
		return Identity{}, fmt.Errorf("identity: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Identity{}, fmt.Errorf("identity: %s -> %s: %w", remote, local, err)
	}
	deadline := time.Now().Add(retryWindow)
	backoff := retryBackoff
	for tries := 1; ; tries++ {
		id, err := r.resolveOnce(remote, local)
		if err == nil {
			return id, nil
		}
		retry := errors.Is(err, ErrSocketNotFound) || errors.Is(err, ErrNoOwner) || errors.Is(err, errOwnerGone)
		if !retry || time.Now().Add(backoff).After(deadline) {
			return Identity{}, fmt.Errorf("identity: %s -> %s (%d tries): %w", remote, local, tries, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return Identity{}, fmt.Errorf("identity: %s -> %s: %w (last: %w)", remote, local, ctx.Err(), err)
		case <-t.C:
		}
		backoff *= 2
	}
}

// resolveOnce does one pass: sock_diag, owner, exe, ancestors, and checks the
// owner still holds the socket afterwards (so a pid reused meanwhile is not
// reported).
func (r *Netlink) resolveOnce(client, server netip.AddrPort) (Identity, error) {
	d, err := r.diag.lookup(client, server)
	if err != nil {
		return Identity{}, err
	}
	if d.inode == 0 {
		return Identity{}, fmt.Errorf("socket in TCP state %d has no inode (closed by its owner): %w", d.state, ErrNoOwner)
	}
	ref, err := r.owner(d.inode)
	if err != nil {
		return Identity{}, err
	}
	exe, err := r.proc.exe(ref.pid)
	if err != nil {
		return Identity{}, fmt.Errorf("pid %d (socket inode %d): %w: %w", ref.pid, d.inode, errOwnerGone, err)
	}
	anc := r.proc.ancestors(ref.pid)
	if !r.proc.fdHolds(ref, d.inode) {
		r.cache.forget(d.inode)
		return Identity{}, fmt.Errorf("pid %d released socket inode %d: %w", ref.pid, d.inode, errOwnerGone)
	}
	r.cache.owned(ref.pid)
	id := Identity{Pid: ref.pid, Exe: exe, Ancestors: anc, UID: d.uid}
	if !r.allProcs {
		holders, err := r.otherHolders(ref.pid, d.inode)
		if err != nil {
			return Identity{}, err
		}
		if len(holders) > 0 {
			id.Holders = append([]Holder{{Pid: ref.pid, Exe: exe, Ancestors: anc}}, holders...)
		}
	}
	return id, nil
}

// otherHolders scans every other candidate for the socket: a socket
// inherited by a child or passed over a unix socket is held by several
// processes, and each may write on it.
func (r *Netlink) otherHolders(owner int, inode uint32) ([]Holder, error) {
	pids, err := r.pids()
	if err != nil {
		return nil, fmt.Errorf("candidate pids: %w", err)
	}
	var out []Holder
	for _, pid := range pids {
		if pid == owner {
			continue
		}
		fd, err := r.proc.scanFds(pid, inode, func(uint32, fdRef) {})
		if err != nil || fd < 0 {
			continue // gone, or not a holder
		}
		exe, err := r.proc.exe(pid)
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, Holder{Pid: pid, Exe: exe, Ancestors: r.proc.ancestors(pid)})
	}
	return out, nil
}

// owner finds the fd holding the socket: a validated cache hit, else a scan
// of the candidates, recent owners first, then newest first.
func (r *Netlink) owner(inode uint32) (fdRef, error) {
	if ref, ok := r.cache.get(inode); ok {
		if r.proc.fdHolds(ref, inode) {
			return ref, nil
		}
		r.cache.forget(inode)
	}
	seen := map[uint32]fdRef{}
	note := func(ino uint32, ref fdRef) { seen[ino] = ref }
	scan := func(pid int) (fdRef, bool) {
		fd, err := r.proc.scanFds(pid, inode, note)
		if err == nil && fd >= 0 {
			note(inode, fdRef{pid: pid, fd: fd})
		}
		if len(seen) > 0 {
			r.cache.put(seen)
			clear(seen)
		}
		return fdRef{pid: pid, fd: fd}, err == nil && fd >= 0
	}
	// Recent owners first, before listing every process: a client that
	// opened one connection usually opens the next (a busy agent, a load
	// generator). Only when any process may be a candidate (no WithPids).
	var tried []int
	if r.allProcs {
		for _, pid := range r.cache.recent() {
			if ref, ok := scan(pid); ok {
				return ref, nil
			}
			tried = append(tried, pid)
		}
	}
	pids, err := r.pids()
	if err != nil {
		return fdRef{}, fmt.Errorf("candidate pids: %w", err)
	}
	pids = append([]int(nil), pids...)
	newestFirst(pids, r.proc.lastPid())
	for _, pid := range r.cache.order(pids) {
		if slices.Contains(tried, pid) {
			continue
		}
		if ref, ok := scan(pid); ok {
			return ref, nil
		}
	}
	return fdRef{}, fmt.Errorf("no process among %d candidates owns socket inode %d: %w", len(pids), inode, ErrNoOwner)
}
