package idrange

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultClaimDir is where the host's claims live. /run is a tmpfs: claims
// do not outlive a boot, and every gateway registers its records' ranges
// again as it starts (Allocator.Register).
func DefaultClaimDir() string { return "/run/stockade/ids" }

// Owner names the sandbox a range is claimed for: a sandbox is its state
// dir and name (the nodes of one cluster host share the state dir).
type Owner struct {
	StateDir string `json:"stateDir"`
	Sandbox  string `json:"sandbox"`
	// Workspace exists while the sandbox does: a claim whose workspace
	// is gone (deleted, or its state dir removed) is stale.
	Workspace string `json:"workspace"`
	// Pid is the supervisor that holds the claim (Hold); 0 when none did.
	Pid int `json:"pid,omitempty"`
}

func (o Owner) same(p Owner) bool { return o.StateDir == p.StateDir && o.Sandbox == p.Sandbox }

func (o Owner) String() string {
	s := fmt.Sprintf("sandbox %s of state dir %s", o.Sandbox, o.StateDir)
	if o.Pid > 0 {
		s += fmt.Sprintf(" (supervisor pid %d)", o.Pid)
	}
	return s
}

// live reports whether the sandbox o names still exists (its workspace
// does); a claim it wrote is stale otherwise. Only a workspace that is
// certainly gone makes it stale.
func (o Owner) live() bool {
	if o.Sandbox == "" || o.Workspace == "" {
		return false // an empty or torn claim: its writer died mid-write
	}
	_, err := os.Lstat(o.Workspace)
	return !errors.Is(err, fs.ErrNotExist)
}

// ClashError: the range is another sandbox's on this host. Nothing was
// started; the sandbox must not run with ids another one has.
type ClashError struct {
	Range Range
	// Holder is the other sandbox; Running: its supervisor holds the
	// claim now.
	Holder  Owner
	Running bool
	File    string
}

func (e *ClashError) Error() string {
	if e.Running {
		return fmt.Sprintf("host ids %s are in use by %s (claim %s): two sandboxes never share host ids; stop that sandbox, or delete this one and create it again (it gets a new range)",
			e.Range, e.Holder, e.File)
	}
	h := e.Holder
	h.Pid = 0 // its last supervisor's, gone
	return fmt.Sprintf("host ids %s belong to %s, which still exists though it does not run (claim %s): two sandboxes never share host ids; delete one of the two (if that sandbox is gone for good, remove the claim file)",
		e.Range, h, e.File)
}

// Claims are the host's claim files in one directory.
type Claims struct{ dir string }

// NewClaims returns the claims in dir (DefaultClaimDir in service).
func NewClaims(dir string) *Claims { return &Claims{dir: dir} }

// Dir is the claims' directory.
func (c *Claims) Dir() string { return c.dir }

func claimName(r Range) string { return strconv.FormatUint(uint64(r.Base), 10) }

// openDir opens the claim directory, making it (0700) when missing; one
// that is a link, not owned by this user, or writable by others, is
// refused (its claims would prove nothing), and so is such a parent.
func (c *Claims) openDir() (int, error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return -1, fmt.Errorf("uid claims: %w", err)
	}
	if err := checkDir(filepath.Dir(c.dir), false); err != nil {
		return -1, err
	}
	fd, err := unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("uid claims: open %s: %w", c.dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("uid claims: %s: %w", c.dir, err)
	}
	if err := checkOwner(c.dir, st, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkDir refuses a directory that is a link, owned by another user, or
// writable by others (strict: open to them at all; a parent may be
// world-readable, as /run is).
func checkDir(dir string, strict bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("uid claims: %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("uid claims: %s is not a directory (a link?): remove it, and let the gateway make it", dir)
	}
	return checkOwner(dir, st, strict)
}

func checkOwner(dir string, st unix.Stat_t, strict bool) error {
	bad := uint32(0o022)
	if strict {
		bad = 0o077
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&bad != 0 {
		return fmt.Errorf("uid claims: %s is owned by uid %d with mode %o: it must be this user's (uid %d) and closed to others (chown/chmod it, or remove it and let the gateway make it)",
			dir, st.Uid, st.Mode&0o7777, os.Geteuid())
	}
	return nil
}

// publish creates the claim file for r naming o, whole, unless one exists
// (a temporary file linked into place: no reader ever sees it empty).
// It reports whether it created it.
func publish(dirfd int, r Range, o Owner) (bool, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	tmp := ".tmp-" + hex.EncodeToString(b)
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, fmt.Errorf("uid claims: %w", err)
	}
	defer func() { _ = unix.Unlinkat(dirfd, tmp, 0) }()
	err = writeOwner(fd, o)
	unix.Close(fd)
	if err != nil {
		return false, err
	}
	err = unix.Linkat(dirfd, tmp, dirfd, claimName(r), 0)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("uid claims: claim %s: %w", r, err)
	}
	return true, nil
}

func writeOwner(fd int, o Owner) error {
	b, _ := json.Marshal(o)
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("uid claims: %w", err)
	}
	if _, err := unix.Pwrite(fd, append(b, '\n'), 0); err != nil {
		return fmt.Errorf("uid claims: %w", err)
	}
	return nil
}

func readOwner(fd int) Owner {
	var o Owner
	b, err := io.ReadAll(io.NewSectionReader(fdReaderAt(fd), 0, 4096))
	if err == nil {
		_ = json.Unmarshal(b, &o) // torn or foreign content: an empty owner, stale
	}
	return o
}

type fdReaderAt int

func (f fdReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := unix.Pread(int(f), p, off)
	if err == nil && n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, err
}

// lock takes the claim file's write lock (an open file description lock:
// it is this descriptor's, released when it is closed, never by another
// descriptor of the process). It reports false when another holds it.
func lock(fd int) (bool, error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("uid claims: lock: %w", err)
	}
	return true, nil
}

// openClaim opens r's claim file, publishing one naming o first when
// there is none.
func (c *Claims) openClaim(r Range, o Owner) (fd int, created bool, err error) {
	dirfd, err := c.openDir()
	if err != nil {
		return -1, false, err
	}
	defer unix.Close(dirfd)
	if created, err = publish(dirfd, r, o); err != nil {
		return -1, false, err
	}
	fd, err = unix.Openat(dirfd, claimName(r), unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("uid claims: open %s: %w", c.path(r), err)
	}
	return fd, created, nil
}

func (c *Claims) path(r Range) string { return filepath.Join(c.dir, claimName(r)) }

// Drop removes the claim of r when it names o and no supervisor holds it:
// o was deleted with its workspace, so the claim would only be stale. A
// claim held, or naming another sandbox, stays.
func (c *Claims) Drop(r Range, o Owner) error {
	dirfd, err := c.openDir()
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat(dirfd, claimName(r), unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("uid claims: open %s: %w", c.path(r), err)
	}
	defer unix.Close(fd)
	got, err := lock(fd)
	if err != nil || !got || !readOwner(fd).same(o) {
		return err
	}
	if err := unix.Unlinkat(dirfd, claimName(r), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("uid claims: remove %s: %w", c.path(r), err)
	}
	return nil
}

// Of returns the ranges of pool whose claims name o (by state dir and
// name): a sandbox whose record lost its range (a record of an earlier
// version, or one whose range was not the pool's) finds what it claimed
// before, so that its ids, and its workspace's owners, stay the same. A
// directory that cannot be read gives none.
func (c *Claims) Of(o Owner, pool Range) []Range {
	dirfd, err := c.openDir()
	if err != nil {
		return nil
	}
	defer unix.Close(dirfd)
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return nil
	}
	var out []Range
	for _, e := range ents {
		base, err := strconv.ParseUint(e.Name(), 10, 32)
		r := Range{Base: uint32(base), Size: Size}
		if err != nil || !e.Type().IsRegular() || !pool.Holds(r) {
			continue
		}
		fd, err := unix.Openat(dirfd, e.Name(), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if readOwner(fd).same(o) {
			out = append(out, r)
		}
		unix.Close(fd)
	}
	return out
}

// Reserve claims r for o unless another sandbox has it: it creates the
// claim, or takes over a stale one (its lock free and its workspace gone),
// or finds it o's already. When r is another sandbox's it fails with a
// *ClashError naming it.
func (c *Claims) Reserve(r Range, o Owner) error {
	fd, created, err := c.openClaim(r, o)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if created {
		return nil
	}
	got, err := lock(fd)
	if err != nil {
		return err
	}
	cur := readOwner(fd)
	switch {
	case cur.same(o):
		return nil
	case !got:
		return &ClashError{Range: r, Holder: cur, Running: true, File: c.path(r)}
	case cur.live():
		return &ClashError{Range: r, Holder: cur, File: c.path(r)}
	}
	return writeOwner(fd, o)
}

// Hold is a running supervisor's claim on its range: the lock lasts until
// Close (or the process's end).
type Hold struct{ f *os.File }

// Close releases the claim's lock; the claim stays (the sandbox exists).
func (h *Hold) Close() error { return h.f.Close() }

// holdWait bounds waiting for a claim held by an earlier supervisor of the
// same sandbox (it exits as the new one starts).
const holdWait = 5 * time.Second

// Hold takes r's claim for o (o.Pid: the supervisor) for as long as it
// runs: it fails with a *ClashError when another sandbox's supervisor
// holds it, or when the claim names another sandbox that still exists.
func (c *Claims) Hold(r Range, o Owner) (*Hold, error) {
	fd, _, err := c.openClaim(r, o)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(holdWait)
	for {
		got, err := lock(fd)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		cur := readOwner(fd)
		if !got {
			if cur.same(o) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond) // our previous supervisor, on its way out
				continue
			}
			unix.Close(fd)
			return nil, &ClashError{Range: r, Holder: cur, Running: true, File: c.path(r)}
		}
		if !cur.same(o) && cur.live() {
			unix.Close(fd)
			return nil, &ClashError{Range: r, Holder: cur, File: c.path(r)}
		}
		if err := writeOwner(fd, o); err != nil {
			unix.Close(fd)
			return nil, err
		}
		return &Hold{f: os.NewFile(uintptr(fd), c.path(r))}, nil
	}
}
