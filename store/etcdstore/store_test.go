package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/internal/etcdtest"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/store/etcdstore"
)

var _ sandbox.Store = (*etcdstore.Store)(nil)

// startEtcd starts a real etcd on 127.0.0.1 (internal/etcdtest).
func startEtcd(t *testing.T) *etcdtest.Server { return etcdtest.Start(t) }

func openStore(t *testing.T, e *etcdtest.Server, prefix string) *etcdstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: []string{e.Endpoint}, Prefix: prefix, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawClient is a plain etcd client, to look at and plant values.
func rawClient(t *testing.T, e *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func testRecord(name string, i int) store.Record {
	return store.Record{
		Spec: store.Spec{
			Name:          name,
			UID:           fmt.Sprintf("a%d", i),
			Policy:        "version: 1\n",
			PolicyVersion: uint64(i + 1),
			Workdir:       "/sandbox",
			Argv:          []string{"/bin/sh", "-c", fmt.Sprint("echo ", i)},
			Restart:       lifecycle.RestartPolicy(i % 3),
			Created:       time.Date(2026, 3, 1, 0, 0, i, 0, time.UTC),
		},
		Intent: store.IntentRunning,
		Lifecycle: lifecycle.Snapshot{
			Phase: lifecycle.PhaseReady, Since: time.Date(2026, 3, 1, 0, 1, i, 0, time.UTC),
		},
		SupervisorPID: 1000 + i,
		WorkloadPID:   2000 + i,
		InstanceID:    fmt.Sprintf("inst-%d", i),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantRecord checks the stored record is want at revision rev.
func wantRecord(t *testing.T, s *etcdstore.Store, want store.Record, rev uint64) {
	t.Helper()
	got, err := s.Get(ctxT(t), want.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	want.Schema, want.Revision = store.SchemaVersion, rev
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("record %s:\n got %+v\nwant %+v", want.Spec.Name, got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	e := startEtcd(t)
	s := openStore(t, e, "/t/roundtrip")
	cli := rawClient(t, e)
	ctx := ctxT(t)

	if _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing record: %v, want ErrNotFound", err)
	}
	a := testRecord("a", 1)
	a.KeepWorkspace = true
	r1, err := s.Put(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if r1 == 0 {
		t.Fatal("Put returned revision 0")
	}
	wantRecord(t, s, a, r1)

	// The value is the record's JSON without its revision; the key is
	// prefix + name (a "/" added to the prefix).
	raw, err := cli.Get(ctx, "/t/roundtrip/a")
	if err != nil || len(raw.Kvs) != 1 {
		t.Fatalf("raw get: %v %v", raw, err)
	}
	if v := string(raw.Kvs[0].Value); strings.Contains(v, `"revision"`) || !strings.Contains(v, `"schema":1`) {
		t.Fatalf("stored value %s: want schema 1 and no revision", v)
	}
	if uint64(raw.Kvs[0].ModRevision) != r1 {
		t.Fatalf("key's ModRevision %d, Put returned %d", raw.Kvs[0].ModRevision, r1)
	}

	// Update at the read revision.
	a.Revision = r1
	a.Intent = store.IntentStopped
	r2, err := s.Put(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if r2 <= r1 {
		t.Fatalf("revision after update %d, want > %d", r2, r1)
	}
	wantRecord(t, s, a, r2)

	// An update at the old revision is refused and changes nothing.
	stale := a
	stale.Revision, stale.Intent = r1, store.IntentDeleted
	if _, err := s.Put(ctx, stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put at a stale revision: %v, want ErrConflict", err)
	}
	wantRecord(t, s, a, r2)

	b := testRecord("b", 2)
	rb, err := s.Put(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	// A key outside the prefix (sharing its first bytes) is not listed.
	if _, err := cli.Put(ctx, "/t/roundtrip-other/x", "{}"); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Spec.Name != "a" || recs[1].Spec.Name != "b" ||
		recs[0].Revision != r2 || recs[1].Revision != rb {
		t.Fatalf("List: %+v, want a@%d and b@%d", recs, r2, rb)
	}

	// A stale delete is refused; the record stays.
	err = s.Delete(ctx, "a", r1)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete at a stale revision: %v, want ErrConflict", err)
	}
	if !strings.Contains(err.Error(), e.Endpoint) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("error %q does not name the endpoint and the sandbox", err)
	}
	wantRecord(t, s, a, r2)
	if err := s.Delete(ctx, "a", 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Delete at revision 0 of an existing record: %v, want ErrConflict", err)
	}

	if err := s.Delete(ctx, "a", r2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a", r2); err != nil {
		t.Fatalf("Delete of a missing record: %v, want nil", err)
	}
	// Created again: a new record, from revision 0.
	if _, err := s.Put(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Put at the deleted record's revision: %v, want ErrConflict", err)
	}
	a.Revision = 0
	r3, err := s.Put(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, a, r3)
}

func TestCreateOverExistingConflicts(t *testing.T) {
	e := startEtcd(t)
	s := openStore(t, e, "/t/create/")
	ctx := ctxT(t)
	first := testRecord("x", 1)
	rev, err := s.Put(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	second := testRecord("x", 2)
	_, err = s.Put(ctx, second)
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	if !strings.Contains(err.Error(), e.Endpoint) || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("error %q does not name the endpoint and the sandbox", err)
	}
	wantRecord(t, s, first, rev)
}

// Two writers (two clients, as two gateways would be) read the same
// revision and write at once: exactly one wins each round.
func TestConcurrentWritersOneWins(t *testing.T) {
	e := startEtcd(t)
	s1 := openStore(t, e, "/t/race/")
	s2 := openStore(t, e, "/t/race/")
	ctx := ctxT(t)
	base := testRecord("r", 0)
	rev, err := s1.Put(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 20; round++ {
		read, err := s1.Get(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if read.Revision != rev {
			t.Fatalf("round %d: read revision %d, last written %d", round, read.Revision, rev)
		}
		recs := [2]store.Record{read, read}
		recs[0].InstanceID, recs[1].InstanceID = fmt.Sprintf("one-%d", round), fmt.Sprintf("two-%d", round)
		var revs [2]uint64
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, s := range []*etcdstore.Store{s1, s2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				revs[i], errs[i] = s.Put(ctx, recs[i])
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range 2 {
			switch {
			case errs[i] == nil:
				if winner >= 0 {
					t.Fatalf("round %d: both writers won (revisions %d, %d)", round, revs[0], revs[1])
				}
				winner = i
			case !errors.Is(errs[i], store.ErrConflict):
				t.Fatalf("round %d: writer %d: %v, want ErrConflict", round, i, errs[i])
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer won: %v; %v", round, errs[0], errs[1])
		}
		got, err := s2.Get(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if got.InstanceID != recs[winner].InstanceID || got.Revision != revs[winner] {
			t.Fatalf("round %d: stored %s@%d, the winner wrote %s@%d", round, got.InstanceID, got.Revision, recs[winner].InstanceID, revs[winner])
		}
		rev = revs[winner]
	}
}

// A record written by a newer stockade is refused by Get and left out of
// List (named in its error), like the bbolt store does.
func TestNewerSchemaRefused(t *testing.T) {
	e := startEtcd(t)
	s := openStore(t, e, "/t/schema/")
	cli := rawClient(t, e)
	ctx := ctxT(t)
	if _, err := s.Put(ctx, testRecord("ok", 1)); err != nil {
		t.Fatal(err)
	}
	newer := fmt.Sprintf(`{"schema":%d,"spec":{"name":"future"},"intent":"running","lifecycle":{}}`, store.SchemaVersion+1)
	if _, err := cli.Put(ctx, "/t/schema/future", newer); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/t/schema/noschema", `{"spec":{"name":"noschema"}}`); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, "future")
	if err == nil || !strings.Contains(err.Error(), "newer stockade") || !strings.Contains(err.Error(), `"future"`) {
		t.Fatalf("Get of a newer record: %v, want a refusal naming it", err)
	}
	if _, err := s.Get(ctx, "noschema"); err == nil || !strings.Contains(err.Error(), "no schema version") {
		t.Fatalf("Get of a record without schema: %v, want a refusal", err)
	}
	recs, err := s.List(ctx)
	if len(recs) != 1 || recs[0].Spec.Name != "ok" {
		t.Fatalf("List: %+v, want only ok", recs)
	}
	if err == nil || !strings.Contains(err.Error(), `"future"`) || !strings.Contains(err.Error(), `"noschema"`) {
		t.Fatalf("List error %v: want one naming future and noschema", err)
	}
}

// With etcd gone every call returns by its context's deadline, with an
// error naming the endpoint and the sandbox.
func TestDeadlineHonoured(t *testing.T) {
	e := startEtcd(t)
	s := openStore(t, e, "/t/deadline/")
	rev, err := s.Put(ctxT(t), testRecord("d", 1))
	if err != nil {
		t.Fatal(err)
	}
	e.Stop(t)

	const limit = 1500 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"put": func(ctx context.Context) error {
			r := testRecord("d", 2)
			r.Revision = rev
			_, err := s.Put(ctx, r)
			return err
		},
		"get":    func(ctx context.Context) error { _, err := s.Get(ctx, "d"); return err },
		"delete": func(ctx context.Context) error { return s.Delete(ctx, "d", rev) },
		"list":   func(ctx context.Context) error { _, err := s.List(ctx); return err },
	}
	for op, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		t0 := time.Now()
		err := call(ctx)
		took := time.Since(t0)
		cancel()
		t.Logf("%s with etcd stopped: %s: %v", op, took.Round(time.Millisecond), err)
		if err == nil {
			t.Fatalf("%s with etcd stopped succeeded", op)
		}
		if took > limit+time.Second {
			t.Errorf("%s took %s, deadline %s", op, took, limit)
		}
		if !strings.Contains(err.Error(), e.Endpoint) {
			t.Errorf("%s error %q does not name the endpoint", op, err)
		}
		if op != "list" && !strings.Contains(err.Error(), `"d"`) {
			t.Errorf("%s error %q does not name the sandbox", op, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s error %q does not wrap context.DeadlineExceeded", op, err)
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s error %q claims a conflict or a missing record", op, err)
		}
	}

	// Open against it fails by its deadline too.
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	t0 := time.Now()
	_, err = etcdstore.Open(ctx, etcdstore.Config{Endpoints: []string{e.Endpoint}})
	if err == nil || !strings.Contains(err.Error(), e.Endpoint) {
		t.Fatalf("Open with etcd stopped: %v, want an error naming %s", err, e.Endpoint)
	}
	if took := time.Since(t0); took > limit+time.Second {
		t.Errorf("Open took %s, deadline %s", took, limit)
	}
}
