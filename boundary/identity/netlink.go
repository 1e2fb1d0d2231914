package identity

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

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
	trusted  int
	inj      fault.Injector
	bounded  bool
	noEvents bool
	records  ConnectRecords
	tamper   *tamperCheck
}

// WithDiagFD makes the resolver use an existing NETLINK_SOCK_DIAG socket (for
// example one created inside a sandbox's network namespace) instead of
// creating one in the current namespace. The resolver takes ownership of fd:
// it closes it on Close, and NewNetlink closes it when it fails.
func WithDiagFD(fd int) Option { return func(c *config) { c.diagFD = fd } }

// WithPids restricts the candidate owners to the pids it returns, numbered
// as in the proc root (default: every process in the proc root). The
// candidates are then a bounded set, and every holder of a socket is found
// (Identity.Holders).
func WithPids(f func() ([]int, error)) Option {
	return func(c *config) { c.pids, c.bounded = f, true }
}

// WithStopAt ends every ancestor walk below pid (a sandbox's init): the
// ancestors are the sandbox's processes, never the host's above it.
func WithStopAt(pid int) Option { return func(c *config) { c.stopAt = pid } }

// WithTrusted names a process of ours that can never hold a descriptor the
// workload made (a sandbox's init: the workload is its child, it inherits
// nothing from it, and the only descriptors it receives come from the
// supervisor over a socket the workload cannot reach). Holder scans skip
// it, so a connection's cost does not grow with init's descriptors. A
// socket only it held would have no owner: denied, as any unowned one.
func WithTrusted(pid int) Option { return func(c *config) { c.trusted = pid } }

// WithProcRoot reads processes under root instead of /proc: a sandbox's own
// proc mount (nsrun.Sandbox.ProcRoot), which lists only the sandbox's
// processes, numbered as inside. The candidates are then a bounded set,
// and every holder of a socket is found (Identity.Holders).
func WithProcRoot(root string) Option {
	return func(c *config) { c.procRoot, c.bounded = root, true }
}

// WithoutProcEvents makes every lookup read each process from /proc, even
// where the kernel's process events could vouch for what was read before
// (tests and benchmarks that compare the two).
func WithoutProcEvents() Option { return func(c *config) { c.noEvents = true } }

// WithInjector sets the fault seam consulted at fault.IdentityLookup.
func WithInjector(inj fault.Injector) Option { return func(c *config) { c.inj = inj } }

// Netlink resolves peer identity through sock_diag and procfs. It is safe for
// concurrent use.
type Netlink struct {
	diag      *diagConn
	proc      procFS
	pids      func() ([]int, error)
	inj       fault.Injector
	cache     *ownerCache
	eventsErr error // why process events are not used (nil: they are)
	// cands keeps a bounded candidate list while process events vouch for
	// it (nil without events or without bounded candidates).
	cands *candidateCache
	// trusted is never scanned for holders (WithTrusted; 0: none).
	trusted int
	// quiet: holder scans skip processes that have not run since their
	// descriptors were read (quiet.go); quietErr says why not.
	quiet    bool
	quietErr error
	// bounded: the candidates are a sandbox's processes (WithPids or
	// WithProcRoot), all scanned for holders. Otherwise every process of
	// the host is a candidate: recent owners are scanned before listing
	// /proc, and the first holder found is the owner.
	bounded bool
	// records: connects recorded in the kernel (WithConnectRecords; nil:
	// none), keyed by the cookie of the network namespace the sock_diag
	// socket is in (netns).
	records ConnectRecords
	netns   uint64
	// byRecord and byDiag count the connections identified each way
	// (Sources).
	byRecord, byDiag atomic.Uint64
	// seed keys candidatesHash.
	seed maphash.Seed
	// tamper: what Tampered judges (WithTamperCheck; nil: nothing).
	tamper *tamperCheck
}

// Sources counts the connections a Netlink resolver identified, by where
// their owner came from: an operator's check that the connect records
// answer (`boundary serve` metrics, the supervisor's log at its stop).
type Sources struct {
	// Records: from the connect the kernel recorded (WithConnectRecords).
	Records uint64
	// SockDiag: through sock_diag and the candidates' descriptors.
	SockDiag uint64
}

// Sources returns how many connections each way has identified so far.
func (r *Netlink) Sources() Sources {
	return Sources{Records: r.byRecord.Load(), SockDiag: r.byDiag.Load()}
}

var _ Resolver = (*Netlink)(nil)
var _ Ender = (*Netlink)(nil)
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
		if d, err = adoptDiag(c.diagFD); err != nil {
			_ = unix.Close(c.diagFD) // owned from the call on (WithDiagFD)
		}
	} else {
		d, err = openDiag()
	}
	if err != nil {
		return nil, err
	}
	r := &Netlink{diag: d, proc: newProcFS(c.procRoot, c.stopAt), pids: c.pids, inj: c.inj, cache: newOwnerCache(), bounded: c.bounded, trusted: c.trusted,
		seed: maphash.MakeSeed(), tamper: c.tamper}
	// Records number processes as the host does: usable with the host's
	// /proc only (not a sandbox's proc mount, WithProcRoot).
	if c.records != nil && c.procRoot == "/proc" {
		// The connections looked up are in the sock_diag socket's network
		// namespace: records are keyed by its cookie.
		netns, err := unix.GetsockoptUint64(d.fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		if err != nil {
			_ = d.close()
			return nil, fmt.Errorf("identity: network namespace cookie of the sock_diag socket: %w", err)
		}
		r.records, r.netns = c.records, netns
	}
	// Process events number processes as the initial pid namespace does:
	// usable with the host's /proc only. Without them (no CAP_NET_ADMIN, a
	// container), every lookup reads what it needs; nothing else changes.
	switch {
	case c.noEvents:
		r.eventsErr = errors.New("identity: process events not wanted (WithoutProcEvents)")
	case c.procRoot != "/proc":
		r.eventsErr = fmt.Errorf("identity: process events number processes as the host does; not used with proc root %s", c.procRoot)
	default:
		r.proc.t.events, r.eventsErr = openProcEvents(250*time.Millisecond, eventsQueueBytes)
		if ev := r.proc.t.events; ev != nil {
			// The pid cursor from the forks the events show: no read of
			// /proc/loadavg per lookup. Only when no candidate is above it:
			// a process forked since the last drain (or whose fork event
			// came after a later pid's, from another CPU) would otherwise
			// pass for one allocated before a wrap-around. Then, and until
			// a fork was seen, loadavg, read after the candidates were.
			loadavg := r.proc.cursor
			r.proc.cursor = func(pids []int) int {
				if last := int(ev.forkedLast.Load()); last > 0 && (len(pids) == 0 || slices.Max(pids) <= last) {
					return last
				}
				return loadavg(pids)
			}
		}
	}
	if r.pids == nil {
		r.pids = r.proc.allPids
	}
	if r.bounded && r.proc.t.events != nil {
		r.cands = &candidateCache{seed: r.seed}
	}
	switch {
	case !r.bounded:
		r.quietErr = errors.New("identity: quiet processes: only for a sandbox's candidates (the host's keep one owner)")
	case r.proc.t.events == nil:
		r.quietErr = fmt.Errorf("identity: quiet processes need process events (forks end a snapshot): %w", r.eventsErr)
	default:
		r.quietErr = runsCounted()
		r.quiet = r.quietErr == nil
	}
	return r, nil
}

// candidateCache keeps the list of a bounded candidate set (a sandbox's
// processes) between lookups. A sandbox's processes come only from forks
// of its processes, so the list holds until a candidate forks a process or
// one exits, or events are lost: then the next lookup lists them again.
type candidateCache struct {
	seed  maphash.Seed
	mu    sync.Mutex
	pids  []int
	sum   uint64 // sumPids of pids
	valid bool
	epoch uint64
}

func (c *candidateCache) forked(parent, _ int) { c.invalidateIf(parent) }
func (c *candidateCache) exited(pid int)       { c.invalidateIf(pid) }
func (c *candidateCache) lost()                { c.invalidateIf(-1) }

func (c *candidateCache) invalidateIf(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pid < 0 || slices.Contains(c.pids, pid) {
		c.valid = false
		c.epoch++
	}
}

// list returns the candidates and their sum (sumPids): the kept list, or
// list() read now (and kept if no event changed the set meanwhile).
func (c *candidateCache) list(read func() ([]int, error)) ([]int, uint64, error) {
	c.mu.Lock()
	if c.valid {
		pids, sum := slices.Clone(c.pids), c.sum
		c.mu.Unlock()
		return pids, sum, nil
	}
	epoch := c.epoch
	c.mu.Unlock()
	pids, err := read()
	if err != nil {
		return nil, 0, err
	}
	sum := sumPids(c.seed, pids)
	c.mu.Lock()
	if c.epoch == epoch {
		c.pids, c.sum, c.valid = slices.Clone(pids), sum, true
	}
	c.mu.Unlock()
	return pids, sum, nil
}

// keptSum returns the kept list's sum; ok is false when no list is kept.
func (c *candidateCache) keptSum() (sum uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sum, c.valid
}

// ProcEvents returns nil when the kernel's process events vouch for cached
// process facts (the exe and parent of processes met before), so that a
// lookup reads only what changed; otherwise why not (every lookup then
// reads each process it needs).
func (r *Netlink) ProcEvents() error { return r.eventsErr }

// Ended implements Ender: id's connection has ended, so its client's fd
// is likely free for the next socket (guess.go).
func (r *Netlink) Ended(id Identity) {
	if id.Socket != 0 {
		r.proc.t.resolved.end(id.Socket)
	}
}

// QuietProcesses returns nil when holder scans skip the sandbox processes
// that have not run since their descriptors were read; otherwise why not
// (every holder scan then reads every process).
func (r *Netlink) QuietProcesses() error { return r.quietErr }

// Close releases the sock_diag socket, the process events socket and the
// held process handles.
func (r *Netlink) Close() error {
	if ev := r.proc.t.events; ev != nil {
		_ = ev.close()
	}
	r.proc.t.reset()
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
	return r.resolve(ctx, nil, local, remote)
}

// Mark implements Marker: the count of process-event drains begun so far.
func (r *Netlink) Mark() Mark {
	if ev := r.proc.t.events; ev != nil {
		return Mark{drains: ev.drains.Load()}
	}
	return Mark{}
}

// ResolveMarked implements Marker: Resolve, whose first pass needs no
// drain of process events of its own when one has begun since mark (taken
// after the connection was accepted, so after the client connected).
func (r *Netlink) ResolveMarked(ctx context.Context, mark Mark, local, remote netip.AddrPort) (Identity, error) {
	return r.resolve(ctx, &mark, local, remote)
}

func (r *Netlink) resolve(ctx context.Context, mark *Mark, local, remote netip.AddrPort) (Identity, error) {
	if err := r.inj.Inject(fault.IdentityLookup); err != nil {
		return Identity{}, fmt.Errorf("identity: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Identity{}, fmt.Errorf("identity: %s -> %s: %w", remote, local, err)
	}
	deadline := time.Now().Add(retryWindow)
	backoff := retryBackoff
	for tries := 1; ; tries++ {
		id, err := r.resolveOnce(remote, local, mark)
		mark = nil // a retry drains what came since
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
func (r *Netlink) resolveOnce(client, server netip.AddrPort, mark *Mark) (Identity, error) {
	if ev := r.proc.t.events; ev != nil {
		var w eventWatcher
		if r.cands != nil {
			w = r.cands
		}
		ev.sync(r.proc.t, w, mark)
	}
	if r.records != nil {
		id, ok, err := r.fromRecord(client, server)
		if err != nil {
			return Identity{}, err
		}
		if ok {
			r.byRecord.Add(1)
			return id, nil
		}
	}
	d, err := r.diag.lookup(client, server)
	if err != nil {
		return Identity{}, err
	}
	if d.inode == 0 {
		return Identity{}, fmt.Errorf("socket in TCP state %d has no inode (closed by its owner): %w", d.state, ErrNoOwner)
	}
	var (
		ref    fdRef
		h      *procHandle
		others []int  // other holders (bounded candidates only)
		cands  uint64 // the candidates' sum (bounded candidates only)
	)
	if r.bounded {
		ref, h, others, cands, err = r.holders(d.inode)
	} else {
		ref, h, err = r.owner(d.inode)
	}
	if err != nil {
		return Identity{}, err
	}
	defer r.proc.t.release(h, false)
	h.remember(ref.fd, d.inode, true, r.proc.t.resolved.mark(d.inode))
	// The holding was read through h: what is read next through it is
	// about the same process, even if its pid has been reused since.
	exe, start, ex, err := r.proc.describe(h)
	if err != nil {
		r.cache.forget(d.inode)
		return Identity{}, fmt.Errorf("pid %d (socket inode %d): %w: %w", ref.pid, d.inode, errOwnerGone, err)
	}
	anc := r.proc.ancestorsOf(h)
	r.cache.owned(ref.pid)
	r.byDiag.Add(1)
	id := Identity{Pid: ref.pid, Exe: exe, Ancestors: anc, UID: d.uid, Socket: d.inode, Start: start, Exec: ex, cands: cands}
	return r.withHolders(id, others), nil
}

// withHolders adds the other holders of id's socket (others, pids of
// candidates) to id.Holders, id's process first; one that exited meanwhile
// is left out.
func (r *Netlink) withHolders(id Identity, others []int) Identity {
	for _, pid := range others {
		var h Holder
		err := r.proc.withHandle(pid, func(held *procHandle) (err error) {
			h.Exe, h.Start, h.Exec, err = r.proc.describe(held)
			if err == nil {
				h.Pid, h.Ancestors = pid, r.proc.ancestorsOf(held)
			}
			return err
		})
		if err != nil {
			continue // exited meanwhile
		}
		if id.Holders == nil {
			id.Holders = []Holder{{Pid: id.Pid, Exe: id.Exe, Ancestors: id.Ancestors, Start: id.Start, Exec: id.Exec}}
		}
		id.Holders = append(id.Holders, h)
	}
	return id
}

// holders scans every candidate once for the socket (a bounded set: a
// sandbox's processes): a socket inherited by a child or passed over a
// unix socket is held by several processes, and each may write on it. The
// owner is the first holder in the scan order (recent owners first, then
// newest first), or the cached holder when the cache names one that still
// holds it; its holding is read through the returned handle (acquired: the
// caller releases it), as owner does. The trusted process (WithTrusted) is
// not read, nor is a quiet one (quiet.go) whose descriptors, read when it
// was last off every CPU, held no such socket.
func (r *Netlink) holders(inode uint32) (fdRef, *procHandle, []int, uint64, error) {
	var h *procHandle
	owner, cached := r.cache.get(inode)
	if cached {
		if h, cached = r.proc.fdHolds(owner, inode); !cached {
			r.cache.forget(inode)
		}
	}
	pids, sum, err := r.candidates()
	if err != nil {
		r.proc.t.release(h, false)
		return fdRef{}, nil, nil, 0, fmt.Errorf("candidate pids: %w", err)
	}
	pids = r.newestFirst(pids)
	if !cached {
		for _, pid := range r.cache.recent() {
			if !slices.Contains(pids, pid) {
				continue // no longer a candidate
			}
			if fd, held := r.proc.guess(pid, inode, r.cache.note); held != nil {
				owner, h, cached = fdRef{pid: pid, fd: fd}, held, true
				break
			}
		}
	}
	skip := -1
	if cached {
		skip = owner.pid
	}
	var others []int
	r.scanCandidates(pids, inode, skip, func(pid, fd int, held *procHandle) bool {
		if cached {
			r.proc.t.release(held, false)
			others = append(others, pid)
			return false
		}
		owner = fdRef{pid: pid, fd: fd}
		h, cached = r.holding(owner, held, inode)
		return cached
	})
	if !cached {
		return fdRef{}, nil, nil, 0, fmt.Errorf("no process among %d candidates owns socket inode %d: %w", len(pids), inode, ErrNoOwner)
	}
	return owner, h, others, sum, nil
}

// scanCandidates scans each of pids but skip for inode, in the owner
// cache's order, with scanMember; found gets each holder with its handle
// held, and returns true when that holder is the owner (then cached for
// inode). The sockets seen on the way go to the owner cache.
func (r *Netlink) scanCandidates(pids []int, inode uint32, skip int, found func(pid, fd int, held *procHandle) bool) {
	seen := map[uint32]fdRef{}
	note := func(ino uint32, ref fdRef) { seen[ino] = ref }
	for _, pid := range r.cache.order(pids) {
		if pid == skip {
			continue
		}
		fd, held, err := r.scanMember(pid, inode, note, pids)
		if err != nil || fd < 0 {
			continue // gone, or not a holder
		}
		if found(pid, fd, held) {
			note(inode, fdRef{pid: pid, fd: fd})
		}
	}
	if len(seen) > 0 {
		r.cache.put(seen)
	}
}

// candidates lists the bounded candidates, with their sum (sumPids): the
// cached list while process events vouch for it, else read anew.
func (r *Netlink) candidates() ([]int, uint64, error) {
	if r.cands != nil {
		return r.cands.list(r.pids)
	}
	pids, err := r.pids()
	if err != nil {
		return nil, 0, err
	}
	return pids, sumPids(r.seed, pids), nil
}

// newestFirst returns a copy of pids ordered from the most to the least
// recently allocated, by the pid cursor where it is known (a wrap-around
// gives a newer process a smaller pid), else by descending pid.
func (r *Netlink) newestFirst(pids []int) []int {
	pids = slices.Clone(pids)
	newestFirst(pids, r.proc.cursor(pids))
	return pids
}

// scanMember scans one member of a sandbox for inode, as scanFds does,
// except the trusted process and a quiet one whose snapshot has no such
// socket (quiet.go), which are not read at all (-1).
func (r *Netlink) scanMember(pid int, inode uint32, note func(uint32, fdRef), pids []int) (int, *procHandle, error) {
	switch {
	case pid == r.trusted && pid != 0:
		return -1, nil, nil
	case !r.quiet:
		return r.proc.scanFds(pid, inode, note)
	case r.proc.t.quietWithout(pid, inode):
		return -1, nil, nil // off every CPU since its descriptors were read, and no such socket among them
	}
	return r.proc.scanQuiet(pid, inode, note, pids)
}

// holding returns the handle through which ref's holding of inode is
// known: the one the scan read through, or, for a scan by path, ref's
// process held now with its fd read again through the handle.
func (r *Netlink) holding(ref fdRef, scanned *procHandle, inode uint32) (*procHandle, bool) {
	if scanned != nil {
		return scanned, true
	}
	return r.proc.fdHolds(ref, inode)
}

// owner finds the fd holding the socket: a validated cache hit, else a scan
// of the candidates, recent owners first, then newest first. The holding
// is read through the returned handle (acquired: the caller releases it),
// so what is read next through it is about the same process.
func (r *Netlink) owner(inode uint32) (fdRef, *procHandle, error) {
	if ref, ok := r.cache.get(inode); ok {
		if h, ok := r.proc.fdHolds(ref, inode); ok {
			return ref, h, nil
		}
		r.cache.forget(inode)
	}
	seen := map[uint32]fdRef{}
	note := func(ino uint32, ref fdRef) { seen[ino] = ref }
	scan := func(pid int) (fdRef, *procHandle, bool) {
		fd, h, err := r.proc.scanFds(pid, inode, note)
		found := err == nil && fd >= 0
		if found {
			note(inode, fdRef{pid: pid, fd: fd})
		}
		if len(seen) > 0 {
			r.cache.put(seen)
			clear(seen)
		}
		ref := fdRef{pid: pid, fd: fd}
		if found {
			if h, found = r.holding(ref, h, inode); !found {
				r.cache.forget(inode)
			}
		}
		return ref, h, found
	}
	// Recent owners first, before listing every process: a client that
	// opened one connection usually opens the next (a busy agent, a load
	// generator). First the few fds where its new socket most likely is
	// (guess.go), then all of its fds.
	for _, pid := range r.cache.recent() {
		if fd, h := r.proc.guess(pid, inode, r.cache.note); h != nil {
			return fdRef{pid: pid, fd: fd}, h, nil
		}
	}
	var tried []int
	for _, pid := range r.cache.recent() {
		if ref, h, ok := scan(pid); ok {
			return ref, h, nil
		}
		tried = append(tried, pid)
	}
	pids, err := r.pids()
	if err != nil {
		return fdRef{}, nil, fmt.Errorf("candidate pids: %w", err)
	}
	pids = r.newestFirst(pids)
	for _, pid := range r.cache.order(pids) {
		if slices.Contains(tried, pid) {
			continue
		}
		if ref, h, ok := scan(pid); ok {
			return ref, h, nil
		}
	}
	return fdRef{}, nil, fmt.Errorf("no process among %d candidates owns socket inode %d: %w", len(pids), inode, ErrNoOwner)
}
