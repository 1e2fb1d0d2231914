package sandbox

import (
	"errors"
	"os"
	"slices"
	"syscall"

	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/store"
)

// A sandbox's host id range (package idrange; Env.IDs, nil when the
// gateway is unprivileged): given where its record is made (the create,
// on the node that creates it in a cluster) and kept in the record, so a
// restart, a recovery, a gateway restart or a failover reuses it. A
// record without one (an earlier version's) or with one outside the pool
// gets one at its next start, before its supervisor starts, and its
// workspace's files are moved into it by that supervisor (ShiftIDs).

// idOwner is this sandbox as its range's claim names it.
func (a *sandboxActor) idOwner() idrange.Owner {
	return idrange.Owner{StateDir: a.env.StateDir, Sandbox: a.name, Workspace: a.env.Driver.Workspace(a.name)}
}

// assignIDs gives rec a range of the pool unless it has one (create: a new
// record), and sets the ranges its workspace's files are to be moved out
// of: the range of earlier versions for a record that had none, a range
// outside the pool it had, and the range its workspace's root is owned by
// (a workspace kept from an earlier sandbox of this name; that range is
// tried first at a create, so nothing needs to move). It reports whether
// rec changed.
func (a *sandboxActor) assignIDs(rec *store.Record, create bool) (bool, error) {
	ids := a.env.IDs
	if ids == nil {
		return false, nil
	}
	pool := ids.Pool()
	if rec.HostIDs != nil && pool.Holds(*rec.HostIDs) {
		return false, nil
	}
	var from, prefer []idrange.Range
	if root, ok := a.workspaceRange(pool); ok {
		from = append(from, root)
		if create && pool.Holds(root) {
			prefer = append(prefer, root)
		}
	}
	switch {
	case rec.HostIDs != nil:
		from = append(from, *rec.HostIDs)
		a.env.Log.Warn().Str("sandbox", a.name).Str("range", rec.HostIDs.String()).Str("pool", pool.String()).
			Msg("the record's host id range is not in the uid pool: the sandbox gets a new one")
	case !create:
		from = append(from, idrange.Legacy()) // every sandbox of earlier versions ran as it
	}
	used, err := a.usedRanges()
	if err != nil {
		return false, err
	}
	r, err := ids.Allocate(a.idOwner(), used, prefer...)
	if errors.Is(err, idrange.ErrPoolFull) {
		return false, errdefs.Unavailable("%w", err)
	}
	if err != nil {
		return false, errdefs.Internal("sandbox %s: host id range: %w", a.name, err)
	}
	shift := []idrange.Range{}
	for _, f := range slices.Concat(rec.ShiftIDs, from) {
		if err := idrange.CheckShiftSource(f, r); err != nil {
			if f != r {
				a.env.Log.Warn().Err(err).Str("sandbox", a.name).Msg("the workspace's files are not moved out of this range")
			}
			continue
		}
		if !slices.Contains(shift, f) {
			shift = append(shift, f)
		}
	}
	rec.HostIDs, rec.ShiftIDs = &r, shift
	if len(shift) == 0 {
		rec.ShiftIDs = nil
	}
	a.env.Log.Info().Str("sandbox", a.name).Str("host_ids", r.String()).Any("move_from", rec.ShiftIDs).Msg("host id range given")
	return true, nil
}

// workspaceRange is the sandbox range (of the pool, or of earlier
// versions) the workspace's root is owned by, if any.
func (a *sandboxActor) workspaceRange(pool idrange.Range) (idrange.Range, bool) {
	fi, err := os.Lstat(a.env.Driver.Workspace(a.name))
	if err != nil {
		return idrange.Range{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return idrange.Range{}, false
	}
	return pool.RangeOf(st.Uid)
}

// usedRanges are the ranges of the store's other records (bounded by
// storeTimeout). Records it cannot read, or refuses (store.ErrInvalid:
// never driven), are missing: the host's claims still keep their ranges
// from being given twice on this host.
func (a *sandboxActor) usedRanges() ([]idrange.Range, error) {
	ctx, cancel := bounded(storeTimeout)
	recs, err := a.env.Store.List(ctx)
	cancel()
	var partial *store.PartialListError
	if err != nil && !errors.As(err, &partial) {
		return nil, errdefs.Unavailable("sandbox %s: host id range: list the records: %w", a.name, err)
	}
	var used []idrange.Range
	for _, r := range recs {
		if r.Spec.Name != a.name && r.HostIDs != nil {
			used = append(used, *r.HostIDs)
		}
	}
	return used, nil
}

// registerIDs claims a restored record's range on this host (claims do
// not outlive a boot); a clash is logged, and the supervisor's own claim
// refuses the start.
func (a *sandboxActor) registerIDs() {
	ids, r := a.env.IDs, a.rec.HostIDs
	if ids == nil || r == nil || !ids.Pool().Holds(*r) {
		return
	}
	if err := ids.Register(a.idOwner(), *r); err != nil {
		a.env.Log.Error().Err(err).Str("sandbox", a.name).Msg("host id range")
	}
}

// releaseIDs forgets what the allocator gave this sandbox (deleted, or
// its create failed).
func (a *sandboxActor) releaseIDs() {
	if a.env.IDs == nil {
		return
	}
	a.env.IDs.Release(a.name)
	// Deleted with its workspace: its claim on this host would only be
	// stale (kept with it: the claim keeps the range for the next create).
	if r := a.rec.HostIDs; r != nil && !a.rec.KeepWorkspace {
		if err := a.env.IDs.Drop(*r, a.idOwner()); err != nil {
			a.env.Log.Warn().Err(err).Str("sandbox", a.name).Msg("host id claim not removed; it is stale and will be reused")
		}
	}
}

// launchIDs are the range and the ranges to move out of a launch carries
// (none when unprivileged).
func (a *sandboxActor) launchIDs() (*idrange.Range, []idrange.Range) {
	if a.env.IDs == nil {
		return nil, nil
	}
	return a.rec.HostIDs, a.rec.ShiftIDs
}
