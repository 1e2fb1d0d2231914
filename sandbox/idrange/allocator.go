package idrange

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
)

// ErrPoolFull: every range of the pool is some sandbox's.
var ErrPoolFull = errors.New("the uid pool has no free range")

// Allocator gives sandboxes ranges of a pool. Its methods are safe for
// concurrent use.
type Allocator struct {
	pool   Range
	claims *Claims
	intn   func(n int) int

	mu sync.Mutex
	// held are the ranges this allocator gave, by base, to the sandbox
	// named (until Release): a record not yet written is in no list.
	held map[uint32]string
}

// AllocatorOption configures an Allocator.
type AllocatorOption func(*Allocator)

// WithIntn replaces the random choice of the first range tried (tests).
func WithIntn(f func(n int) int) AllocatorOption { return func(a *Allocator) { a.intn = f } }

// NewAllocator returns an allocator of pool (CheckPool) whose ranges are
// claimed in claims.
func NewAllocator(pool Range, claims *Claims, opts ...AllocatorOption) (*Allocator, error) {
	if err := CheckPool(pool); err != nil {
		return nil, err
	}
	a := &Allocator{pool: pool, claims: claims, intn: rand.IntN, held: map[uint32]string{}}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Pool is the allocator's pool.
func (a *Allocator) Pool() Range { return a.pool }

// Allocate gives sandbox o a range: one of prefer that is free (a kept
// workspace's earlier range, say), else one this host's claims already
// give o (Claims.Of), else the first free one from a random start. Free: not in used (the ranges of the store's other records), not
// given by this allocator to another sandbox, and claimed on this host
// for o (Claims.Reserve: never another sandbox's, of any gateway).
func (a *Allocator) Allocate(o Owner, used []Range, prefer ...Range) (Range, error) {
	taken := map[uint32]bool{}
	for _, r := range used {
		if a.pool.Holds(r) {
			taken[r.Base] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	try := func(r Range) (bool, error) {
		if taken[r.Base] || !a.pool.Holds(r) {
			return false, nil
		}
		if name, ok := a.held[r.Base]; ok && name != o.Sandbox {
			return false, nil
		}
		var clash *ClashError
		if err := a.claims.Reserve(r, o); errors.As(err, &clash) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		for base, name := range a.held {
			if name == o.Sandbox {
				delete(a.held, base)
			}
		}
		a.held[r.Base] = o.Sandbox
		return true, nil
	}
	for _, r := range append(prefer, a.claims.Of(o, a.pool)...) {
		if ok, err := try(r); ok || err != nil {
			return r, err
		}
	}
	n := a.pool.slots()
	start := a.intn(n)
	for i := range n {
		r := a.pool.slot((start + i) % n)
		if ok, err := try(r); ok || err != nil {
			return r, err
		}
	}
	return Range{}, fmt.Errorf("sandbox %s: %w: its %d ranges of %d ids (%s) are the records' of this gateway (%d) or claimed by other sandboxes on this host (%s): delete sandboxes, or give the gateway a larger --uid-pool",
		o.Sandbox, ErrPoolFull, n, Size, a.pool, len(taken), a.claims.Dir())
}

// Register claims r, a range a record already has, for sandbox o on this
// host (a gateway's start: claims do not outlive a boot). It fails with a
// *ClashError naming the other sandbox when r is another's.
func (a *Allocator) Register(o Owner, r Range) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.claims.Reserve(r, o); err != nil {
		return err
	}
	if _, mine := a.held[r.Base]; !mine {
		a.held[r.Base] = o.Sandbox
	}
	return nil
}

// Drop removes o's claim of r on this host (Claims.Drop): o is gone with
// its workspace.
func (a *Allocator) Drop(r Range, o Owner) error { return a.claims.Drop(r, o) }

// Release forgets what the allocator gave sandbox name (it was deleted, or
// its create failed). Its claim stays until its workspace is gone.
func (a *Allocator) Release(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for base, n := range a.held {
		if n == name {
			delete(a.held, base)
		}
	}
}
