package idrange

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// owner is a sandbox of a state dir under root whose workspace exists.
func owner(t *testing.T, root, state, name string) Owner {
	t.Helper()
	ws := filepath.Join(root, state, "sandboxes", name, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return Owner{StateDir: filepath.Join(root, state), Sandbox: name, Workspace: ws}
}

func newAllocator(t *testing.T, pool Range, claims *Claims, first int) *Allocator {
	t.Helper()
	a, err := NewAllocator(pool, claims, WithIntn(func(n int) int { return first % n }))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAllocator(t *testing.T) {
	root := t.TempDir()
	claims := NewClaims(filepath.Join(root, "run", "ids"))
	pool := Range{Base: 16 * Size, Size: 4 * Size}
	a := newAllocator(t, pool, claims, 2)
	ra := owner(t, root, "gw1", "ra")
	r1, err := a.Allocate(ra, nil)
	if err != nil || r1 != pool.slot(2) {
		t.Fatalf("first allocation = %v, %v; want the random start %v", r1, err, pool.slot(2))
	}
	// The store's records are skipped, and so is what this allocator gave.
	rb := owner(t, root, "gw1", "rb")
	r2, err := a.Allocate(rb, []Range{pool.slot(3)})
	if err != nil || r2 != pool.slot(0) {
		t.Fatalf("second allocation = %v, %v; want %v (slot 2 given, slot 3 a record's)", r2, err, pool.slot(0))
	}
	// Another gateway (another state dir, its own allocator and store) on
	// this host: the claims keep it off both ranges.
	b := newAllocator(t, pool, claims, 2)
	rc := owner(t, root, "gw2", "rc")
	r3, err := b.Allocate(rc, nil)
	if err != nil || r3 != pool.slot(3) {
		t.Fatalf("the other gateway got %v, %v; want %v", r3, err, pool.slot(3))
	}
	rd := owner(t, root, "gw2", "rd")
	r4, err := b.Allocate(rd, nil)
	if err != nil || r4 != pool.slot(1) {
		t.Fatalf("the other gateway's second = %v, %v; want %v", r4, err, pool.slot(1))
	}
	// Full: every range is some sandbox's, and the error says how to fix it.
	re := owner(t, root, "gw1", "re")
	if r, err := a.Allocate(re, nil); !errors.Is(err, ErrPoolFull) || !strings.Contains(err.Error(), "--uid-pool") {
		t.Fatalf("a full pool gave %v, %v", r, err)
	}
	// A deleted sandbox's claim is stale once its workspace is gone.
	if err := os.RemoveAll(filepath.Dir(rc.Workspace)); err != nil {
		t.Fatal(err)
	}
	a.Release("rc") // not a's: nothing happens
	r5, err := a.Allocate(re, nil)
	if err != nil || r5 != r3 {
		t.Fatalf("after rc's delete: %v, %v; want its range %v", r5, err, r3)
	}
	// A sandbox created again under a kept workspace's name gets its
	// earlier range back when it is preferred (no shift then).
	a.Release("ra")
	r6, err := a.Allocate(ra, nil, r1)
	if err != nil || r6 != r1 {
		t.Fatalf("ra again, preferring %v: %v, %v", r1, r6, err)
	}
	// Registering a record's range: its own is fine, another's clashes.
	if err := b.Register(rd, r4); err != nil {
		t.Errorf("register rd's own range: %v", err)
	}
	var clash *ClashError
	if err := b.Register(rd, r1); !errors.As(err, &clash) || clash.Holder.Sandbox != "ra" || clash.Running {
		t.Errorf("register ra's range for rd: %v", err)
	}
}

func TestAllocatorOnePool(t *testing.T) {
	root := t.TempDir()
	pool := Range{Base: 32 * Size, Size: Size}
	a := newAllocator(t, pool, NewClaims(filepath.Join(root, "ids")), 0)
	r, err := a.Allocate(owner(t, root, "s", "x"), nil)
	if err != nil || r != pool {
		t.Fatalf("%v %v", r, err)
	}
	_, err = a.Allocate(owner(t, root, "s", "y"), nil)
	if !errors.Is(err, ErrPoolFull) {
		t.Fatalf("a one-range pool gave a second range: %v", err)
	}
	for _, w := range []string{"sandbox y", "1 ranges", pool.String()} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if _, err := NewAllocator(Range{Base: 100000, Size: Size}, NewClaims(root)); err == nil {
		t.Error("an unaligned pool was accepted")
	}
}

func TestHold(t *testing.T) {
	root := t.TempDir()
	claims := NewClaims(filepath.Join(root, "ids"))
	r := Range{Base: 40 * Size, Size: Size}
	x, y := owner(t, root, "gw1", "x"), owner(t, root, "gw2", "y")
	x.Pid = os.Getpid()
	h, err := claims.Hold(r, x)
	if err != nil {
		t.Fatal(err)
	}
	var clash *ClashError
	_, err = claims.Hold(r, y)
	if !errors.As(err, &clash) || !clash.Running || clash.Holder.Sandbox != "x" || !strings.Contains(err.Error(), "in use by sandbox x") {
		t.Fatalf("a second sandbox's supervisor took a held range: %v", err)
	}
	if err := claims.Reserve(r, y); !errors.As(err, &clash) || !clash.Running {
		t.Fatalf("a held range was reserved for another sandbox: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// x stopped but exists: still refused.
	_, err = claims.Hold(r, y)
	if !errors.As(err, &clash) || clash.Running || !strings.Contains(err.Error(), "still exists") {
		t.Fatalf("a stopped sandbox's range was taken: %v", err)
	}
	// The same sandbox again (a restart) holds it.
	h, err = claims.Hold(r, x)
	if err != nil {
		t.Fatalf("x's restart: %v", err)
	}
	h.Close()
	// x deleted (its workspace gone): the claim is stale.
	if err := os.RemoveAll(x.Workspace); err != nil {
		t.Fatal(err)
	}
	h, err = claims.Hold(r, y)
	if err != nil {
		t.Fatalf("y after x's delete: %v", err)
	}
	h.Close()
	b, _ := os.ReadFile(filepath.Join(claims.Dir(), "2621440"))
	if !strings.Contains(string(b), `"sandbox":"y"`) {
		t.Errorf("the claim file: %s", b)
	}
}

func TestClaimDirRefused(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ids")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	o := owner(t, root, "s", "x")
	if err := NewClaims(dir).Reserve(Range{Base: 40 * Size, Size: Size}, o); err == nil || !strings.Contains(err.Error(), "closed to others") {
		t.Errorf("a world-writable claim directory: %v", err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := NewClaims(filepath.Join(link, "ids")).Reserve(Range{Base: 40 * Size, Size: Size}, o); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a claim directory under a link: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("claims written to a refused directory: %v", entries)
	}
}

// TestAllocatorFindsItsOwnClaim: a sandbox whose record lost its range (an
// earlier version's record, or a range outside the pool) gets back the one
// this host's claims give it, not a second one: each replaced range would
// otherwise stay claimed by it until its workspace goes, and fill the pool.
func TestAllocatorFindsItsOwnClaim(t *testing.T) {
	root := t.TempDir()
	claims := NewClaims(filepath.Join(root, "run", "ids"))
	pool := Range{Base: 16 * Size, Size: 4 * Size}
	ra := owner(t, root, "gw1", "ra")
	r1, err := newAllocator(t, pool, claims, 1).Allocate(ra, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A restarted gateway (a new allocator) whose record of ra has no range,
	// with a random start elsewhere.
	for first := range 4 {
		r, err := newAllocator(t, pool, claims, first).Allocate(ra, nil)
		if err != nil || r != r1 {
			t.Fatalf("random start %d: ra got %v, %v; want its claimed %v", first, r, err, r1)
		}
	}
	if got := claims.Of(ra, pool); len(got) != 1 || got[0] != r1 {
		t.Fatalf("claims of ra: %v, want [%v]", got, r1)
	}
}

// TestDropRemovesOnlyAStaleOwnClaim: a deleted sandbox's claim goes; a
// claim a supervisor holds, or one naming another sandbox, stays.
func TestDropRemovesOnlyAStaleOwnClaim(t *testing.T) {
	root := t.TempDir()
	claims := NewClaims(filepath.Join(root, "run", "ids"))
	pool := Range{Base: 16 * Size, Size: 4 * Size}
	a := newAllocator(t, pool, claims, 0)
	ra, rb := owner(t, root, "gw1", "ra"), owner(t, root, "gw1", "rb")
	r1, err := a.Allocate(ra, nil)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Allocate(rb, nil)
	if err != nil {
		t.Fatal(err)
	}
	exists := func(r Range) bool { _, err := os.Stat(claims.path(r)); return err == nil }
	if err := a.Drop(r1, rb); err != nil || !exists(r1) {
		t.Fatalf("rb dropped ra's claim: %v", err)
	}
	h, err := claims.Hold(r2, rb)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Drop(r2, rb); err != nil || !exists(r2) {
		t.Fatalf("a held claim was dropped: %v", err)
	}
	h.Close()
	if err := a.Drop(r1, ra); err != nil || exists(r1) {
		t.Fatalf("ra's own claim after its delete: exists %v, %v", exists(r1), err)
	}
	if got := claims.Of(ra, pool); len(got) != 0 {
		t.Fatalf("claims of ra after the drop: %v", got)
	}
}
