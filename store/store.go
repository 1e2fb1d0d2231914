package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/chaos/fault"
)

// PointWrite is the fault point asked before every write (Put, Delete);
// PointCommitted right after a write committed (kill there tests crash
// recovery at each write).
const (
	PointWrite     = fault.StoreWrite
	PointCommitted = fault.StoreCommitted
)

// ErrNotFound is wrapped by Get for a sandbox the store does not hold.
var ErrNotFound = errors.New("no such sandbox")

// ErrInvalid is wrapped by reads of a record that Record.Validate refuses
// (a name that is a path, a phase that does not exist, ...): it is left in
// the store as it is, and nothing acts on it.
var ErrInvalid = errors.New("refused: not a record this gateway writes")

// PartialListError is what List returns beside the records it could read
// when some it could not (unreadable, or refused: ErrInvalid): one error
// per such record, each naming it. The list itself was read.
type PartialListError struct{ Errs []error }

func (e *PartialListError) Error() string { return errors.Join(e.Errs...).Error() }

// Unwrap returns the records' errors.
func (e *PartialListError) Unwrap() []error { return e.Errs }

// PartialList returns nil for no errors, else a *PartialListError.
func PartialList(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return &PartialListError{Errs: errs}
}

// ErrConflict is wrapped by Put and Delete when the stored record's
// revision is not the one the caller read: someone else wrote it since
// (another actor, another node). Nothing was written.
var ErrConflict = errors.New("the record changed since it was read")

// ErrNotOwner is wrapped by a cluster store's Put and Delete when this
// node does not own the sandbox (any more): its lease lapsed, or another
// node claimed it. Nothing was written; the node must stop driving it.
var ErrNotOwner = errors.New("this node does not own the sandbox")

func sandboxesBucket() []byte { return []byte("sandboxes") }

// clientsBucket holds the certificates issued to clients, by serial.
func clientsBucket() []byte { return []byte("clients") }

// LockedError says another process (normally another gateway) holds the
// state file's lock. PID is 0 when it could not be found in /proc/locks.
type LockedError struct {
	Dir, Path string
	PID       int
	Err       error
}

func (e *LockedError) Error() string {
	holder := "another process holds"
	if e.PID > 0 {
		holder = fmt.Sprintf("pid %d holds", e.PID)
	}
	return fmt.Sprintf("state dir %s is in use by another gateway (%s the lock on %s)", e.Dir, holder, e.Path)
}

func (e *LockedError) Unwrap() error { return e.Err }

// Store is the gateway's state file. Safe for concurrent use.
type Store struct {
	db     *bolt.DB
	path   string
	faults fault.Injector
	// writeMu orders each write together with the fault point asked after
	// its commit: a kill there (a crash test's "after write K") ends the
	// process before any other write can commit. bbolt serializes the
	// commits themselves; the point comes after its lock is released.
	writeMu sync.Mutex
}

type options struct {
	faults      fault.Injector
	lockTimeout time.Duration
}

// Option configures Open.
type Option func(*options)

// WithFaults sets the fault injector asked at PointWrite (default none).
func WithFaults(f fault.Injector) Option { return func(o *options) { o.faults = f } }

// WithLockTimeout sets how long Open waits for the file lock (default 1 s).
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.lockTimeout = d } }

// Open opens (creating it and its directory if needed) the state file at
// path and takes its lock.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{faults: fault.Nop{}, lockTimeout: time.Second}
	for _, f := range opts {
		f(&o)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: state dir %s: %w", dir, err)
	}
	_, statErr := os.Stat(path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.lockTimeout, NoSync: false})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, &LockedError{Dir: dir, Path: path, PID: lockHolder(path), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, faults: o.faults}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(sandboxesBucket()); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(clientsBucket())
		return err
	})
	if err == nil && os.IsNotExist(statErr) {
		err = syncDir(dir) // make the new file's directory entry durable too
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: initialise %s: %w", path, err)
	}
	return s, nil
}

// Path returns the state file's path.
func (s *Store) Path() string { return s.path }

// Close releases the file and its lock.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}

// Put writes rec if the stored record's revision is rec.Revision (0: no
// record of that name yet), and returns the new revision once it is on
// disk. A different stored revision fails with ErrConflict. On error the
// earlier record, if any, is intact.
func (s *Store) Put(ctx context.Context, rec Record) (uint64, error) {
	name := rec.Spec.Name
	if err := rec.Validate(""); err != nil {
		return 0, s.errorf("put", name, err)
	}
	rec.Schema = SchemaVersion
	want := rec.Revision
	rec.Revision++
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, s.errorf("encode", name, err)
	}
	err = s.write(ctx, "put", name, func(b *bolt.Bucket) error {
		if err := checkRevision(b, name, want); err != nil {
			return err
		}
		return b.Put([]byte(name), data)
	})
	if err != nil {
		return 0, err
	}
	return rec.Revision, nil
}

// Delete removes a sandbox's record if its revision is rev; deleting a
// missing one is not an error.
func (s *Store) Delete(ctx context.Context, name string, rev uint64) error {
	return s.write(ctx, "delete", name, func(b *bolt.Bucket) error {
		if b.Get([]byte(name)) == nil {
			return nil
		}
		if err := checkRevision(b, name, rev); err != nil {
			return err
		}
		return b.Delete([]byte(name))
	})
}

// checkRevision compares the stored record's revision with want.
func checkRevision(b *bolt.Bucket, name string, want uint64) error {
	var cur uint64
	if v := b.Get([]byte(name)); v != nil {
		var r struct {
			Revision uint64 `json:"revision"`
		}
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		cur = r.Revision
	}
	if cur != want {
		return fmt.Errorf("%w (stored revision %d, read %d)", ErrConflict, cur, want)
	}
	return nil
}

func (s *Store) write(ctx context.Context, op, name string, f func(*bolt.Bucket) error) error {
	if err := ctx.Err(); err != nil {
		return s.errorf(op, name, err)
	}
	if err := s.faults.Inject(PointWrite); err != nil {
		return s.errorf(op, name, err)
	}
	if err := s.update(func(tx *bolt.Tx) error { return f(tx.Bucket(sandboxesBucket())) }, true); err != nil {
		return s.errorf(op, name, err)
	}
	return nil
}

// update runs one read-write transaction under writeMu. With
// askCommitted (a sandbox's write), PointCommitted is asked after the
// commit, before the next write may start.
func (s *Store) update(f func(*bolt.Tx) error, askCommitted bool) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.db.Update(f); err != nil {
		return err
	}
	if askCommitted {
		return s.faults.Inject(PointCommitted)
	}
	return nil
}

// Get returns one sandbox's record, or an error wrapping ErrNotFound.
func (s *Store) Get(_ context.Context, name string) (Record, error) {
	var rec Record
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(sandboxesBucket()).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		return Decode(name, v, &rec)
	})
	if err != nil {
		return Record{}, s.errorf("get", name, err)
	}
	return rec, nil
}

// List returns every record in byte order of their names. A record that
// cannot be decoded is left out and named in the error, which joins one
// error per such record; the others are still returned.
func (s *Store) List(_ context.Context) ([]Record, error) {
	var recs []Record
	var errs []error
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(sandboxesBucket()).ForEach(func(k, v []byte) error {
			var rec Record
			if err := Decode(string(k), v, &rec); err != nil {
				errs = append(errs, s.errorf("list", string(k), err))
				return nil
			}
			recs = append(recs, rec)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list: %w", s.path, err)
	}
	return recs, PartialList(errs)
}

// Decode reads a record as every Store writes it (JSON), stored under key
// (the sandbox's name), refusing one with no schema version or a newer one
// than this build understands, and one that Record.Validate refuses:
// whatever is in a store is untrusted input.
func Decode(key string, v []byte, rec *Record) error {
	if err := json.Unmarshal(v, rec); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	switch {
	case rec.Schema == 0:
		return errors.New("decode: the record has no schema version")
	case rec.Schema > SchemaVersion:
		return fmt.Errorf("decode: written by a newer stockade (schema %d; this one reads up to %d)", rec.Schema, SchemaVersion)
	}
	if err := rec.Validate(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (s *Store) errorf(op, name string, err error) error {
	return fmt.Errorf("store %s: %s sandbox %q: %w", s.path, op, name, err)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockHolder returns the pid holding a flock on path according to
// /proc/locks, or 0.
func lockHolder(path string) int {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	inode := ":" + strconv.FormatUint(st.Ino, 10)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	byInode := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4242 fd:01:393261 0 EOF"; waiters have "->".
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil {
			continue
		}
		switch {
		case fields[5] == id:
			return pid
		case strings.HasSuffix(fields[5], inode):
			byInode = pid // a stacked filesystem may report another device
		}
	}
	return byInode
}
