package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/idrange"
)

// withIDs gives the world's gateway a uid pool of n ranges (claims in a
// temporary directory), as a root gateway has, and restarts its
// sandboxes actor on it.
func (w *world) withIDs(n int) idrange.Range {
	w.t.Helper()
	pool := idrange.Range{Base: 0x70000000, Size: uint32(n) * idrange.Size}
	a, err := idrange.NewAllocator(pool, idrange.NewClaims(filepath.Join(w.t.TempDir(), "ids")))
	if err != nil {
		w.t.Fatal(err)
	}
	w.env.IDs = a
	w.restartGateway()
	return pool
}

// TestHostIDsKept: each sandbox gets its own range of the pool at create,
// in its record, in its get and in every launch; a supervisor's death and
// recovery, a stop and start and a gateway restart keep it; a full pool
// fails the create (Unavailable) with nothing written; a deleted
// sandbox's range is free again once its workspace is gone.
func TestHostIDsKept(t *testing.T) {
	w := newWorld(t)
	pool := w.withIDs(2)
	w.ready("a")
	w.ready("b")
	ra, rb := w.mustRecord("a").HostIDs, w.mustRecord("b").HostIDs
	if ra == nil || rb == nil || !pool.Holds(*ra) || !pool.Holds(*rb) || ra.Overlaps(*rb) {
		t.Fatalf("ranges %v %v of pool %s", ra, rb, pool)
	}
	if got := w.get("a").Sandbox.HostIds; got != ra.String() {
		t.Errorf("get a: hostIds %q, want %s", got, ra)
	}
	if p := w.proc("a"); p.HostIDs == nil || *p.HostIDs != *ra || p.ShiftIDs != nil {
		t.Errorf("a's launch carried %v %v", p.HostIDs, p.ShiftIDs)
	}
	// The supervisor dies; the recovery's launch has the same range.
	w.proc("a").Exit(errors.New("supervisor exited: signal: killed"))
	w.waitPhase("a", "Recovering")
	w.clock.Advance(time.Minute)
	w.waitFor("the recovery's supervisor", func() bool { return len(w.drv.Procs("a")) == 2 })
	if p := w.proc("a"); *p.HostIDs != *ra {
		t.Errorf("the recovery launched a with %v, want %s", p.HostIDs, ra)
	}
	w.hello("a")
	w.waitPhase("a", "Ready")
	// Stop and start, then a gateway restart.
	w.verb("b", messages.Verb_VERB_STOP)
	w.waitPhase("b", "Stopped")
	w.verb("b", messages.Verb_VERB_START)
	w.waitFor("b's second supervisor", func() bool { return len(w.drv.Procs("b")) == 2 })
	if p := w.proc("b"); *p.HostIDs != *rb {
		t.Errorf("b's start launched %v, want %s", p.HostIDs, rb)
	}
	w.hello("b")
	w.waitPhase("b", "Ready")
	w.restartGateway()
	if got := w.get("b").Sandbox.HostIds; got != rb.String() {
		t.Errorf("after a gateway restart: %q, want %s", got, rb)
	}
	// Full.
	r := w.create("c")
	if r.Status != messages.Status_STATUS_UNAVAILABLE || !strings.Contains(r.Message, "no free range") {
		t.Fatalf("create c on a full pool: %v", r)
	}
	if _, err := w.record("c"); !isNotFound(err) {
		t.Errorf("the refused create left a record: %v", err)
	}
	// a deleted (the fake driver leaves its files: remove them as the
	// process driver does): its range is c's to have.
	w.verb("a", messages.Verb_VERB_DELETE)
	w.waitFor("a gone", func() bool { _, err := w.record("a"); return isNotFound(err) })
	if err := os.RemoveAll(w.drv.Workspace("a")); err != nil {
		t.Fatal(err)
	}
	w.ready("c")
	if rc := w.mustRecord("c").HostIDs; rc == nil || *rc != *ra {
		t.Errorf("c got %v, want a's freed %s", rc, ra)
	}
}

// TestHostIDsEarlierRecords: a record of an earlier version (no range)
// gets one at its next start, written before its supervisor starts, which
// is told to move the workspace's files out of 100000-165535; the first
// Hello of that instance clears the move from the record. A record whose
// range is not the pool's (read from the store: untrusted) gets a new
// one, and a range that is no sandbox's (the host's own ids) is never a
// source of the move. Without a pool (an unprivileged gateway) no range
// is given or launched.
func TestHostIDsEarlierRecords(t *testing.T) {
	w := newWorld(t)
	w.ready("plain") // before the pool: an unprivileged gateway
	if rec := w.mustRecord("plain"); rec.HostIDs != nil || w.proc("plain").HostIDs != nil {
		t.Fatalf("an unprivileged gateway gave a range: %v %v", rec.HostIDs, w.proc("plain").HostIDs)
	}
	pool := w.withIDs(4)
	for _, tc := range []struct {
		name  string
		ids   *idrange.Range
		shift []idrange.Range
	}{
		{"old", nil, []idrange.Range{idrange.Legacy()}},
		{"forged", &idrange.Range{Base: 0, Size: idrange.Size}, nil},
		{"moved", &idrange.Range{Base: 0x10000000, Size: idrange.Size}, []idrange.Range{{Base: 0x10000000, Size: idrange.Size}}},
	} {
		w.ready(tc.name)
		w.verb(tc.name, messages.Verb_VERB_STOP)
		w.waitPhase(tc.name, "Stopped")
		rec := w.mustRecord(tc.name)
		rec.HostIDs, rec.ShiftIDs = tc.ids, nil
		if _, err := w.st.Put(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		w.restartGateway() // the actor reads the record again
		w.verb(tc.name, messages.Verb_VERB_START)
		w.waitFor(tc.name+"'s supervisor", func() bool { return len(w.drv.Procs(tc.name)) == 2 })
		p := w.proc(tc.name)
		rec = w.mustRecord(tc.name)
		if p.HostIDs == nil || !pool.Holds(*p.HostIDs) || rec.HostIDs == nil || *rec.HostIDs != *p.HostIDs {
			t.Errorf("%s: launched %v, record %v, want a range of %s in both", tc.name, p.HostIDs, rec.HostIDs, pool)
			continue
		}
		if !slices.Equal(p.ShiftIDs, tc.shift) || !slices.Equal(rec.ShiftIDs, tc.shift) {
			t.Errorf("%s: move from %v (record %v), want %v", tc.name, p.ShiftIDs, rec.ShiftIDs, tc.shift)
		}
		w.hello(tc.name)
		w.waitPhase(tc.name, "Ready")
		if rec := w.mustRecord(tc.name); rec.ShiftIDs != nil || *rec.HostIDs != *p.HostIDs {
			t.Errorf("%s after Hello: %v %v", tc.name, rec.HostIDs, rec.ShiftIDs)
		}
	}
	if !contains(w.log.String(), "is not in the uid pool") {
		t.Error("the forged range was not logged")
	}
}
