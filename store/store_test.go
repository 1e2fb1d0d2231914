package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/chaos/fault"
)

// The test binary doubles as the child process of the crash and lock
// tests: with STORE_TEST_CHILD set, TestMain runs the child instead.
const (
	envChild = "STORE_TEST_CHILD"
	envPath  = "STORE_TEST_PATH"
	envFirst = "STORE_TEST_FIRST"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "put":
		os.Exit(childPut())
	case "hold":
		os.Exit(childHold())
	case "racekill":
		os.Exit(childRaceKill())
	}
	os.Exit(m.Run())
}

// childPut puts records first, first+1, ... forever, printing "acked i"
// after each Put returns, until it is killed.
func childPut() int {
	s, err := Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	first, _ := strconv.Atoi(os.Getenv(envFirst))
	var latestRev uint64
	if r, err := s.Get(context.Background(), "latest"); err == nil {
		latestRev = r.Revision
	}
	for i := first; ; i++ {
		rec := testRecord(i)
		// A record written but not acked before the last SIGKILL exists:
		// overwrite it at its revision.
		if old, err := s.Get(context.Background(), rec.Spec.Name); err == nil {
			rec.Revision = old.Revision
		}
		if _, err := s.Put(context.Background(), rec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// "latest" is overwritten each time: acked overwrites must stick too.
		latest := testRecord(i)
		latest.Spec.Name, latest.Revision = "latest", latestRev
		rev, err := s.Put(context.Background(), latest)
		latestRev = rev
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("acked %d\n", i)
	}
}

// childRaceKill opens the store, prints "base TXID", arms
// store.committed=kill after STORE_TEST_FIRST more writes and puts records
// from eight goroutines at once until the fault kills it. Each committed
// point is reached 5 ms late (a writer descheduled right after its
// commit, as on a loaded machine), so other writers are ready to commit in
// that moment.
func childRaceKill() int {
	faults := fault.NewSet()
	s, err := Open(os.Getenv(envPath), WithFaults(lateCommitted{faults}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var base int
	if err := s.db.View(func(tx *bolt.Tx) error { base = tx.ID(); return nil }); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	skip, _ := strconv.Atoi(os.Getenv(envFirst))
	faults.Arm(PointCommitted, fault.Rule{Kind: fault.KindKill, Skip: skip, Count: 1})
	fmt.Printf("base %d\n", base)
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := g; ; i += 8 {
				if _, err := s.Put(context.Background(), testRecord(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	fmt.Fprintln(os.Stderr, <-errs)
	return 1
}

// lateCommitted delays PointCommitted by 5 ms before asking the set.
type lateCommitted struct{ set *fault.Set }

func (l lateCommitted) Inject(p fault.Point) error {
	if p == PointCommitted {
		time.Sleep(5 * time.Millisecond)
	}
	return l.set.Inject(p)
}

// childHold opens the store, says "ready" and holds it until stdin closes.
func childHold() int {
	s, err := Open(os.Getenv(envPath))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		return 1
	}
	return 0
}

func testRecord(i int) Record {
	name := fmt.Sprintf("sb-%05d", i)
	return Record{
		Spec: Spec{
			Name:          name,
			Policy:        "version: 1\n# " + strings.Repeat("p", 1500+i%700) + "\n",
			PolicyVersion: uint64(i + 1),
			Workdir:       "/sandbox",
			Argv:          []string{"/bin/sh", "-c", "echo " + strconv.Itoa(i)},
			Restart:       lifecycle.RestartPolicy(i % 3),
			Created:       time.Date(2026, 3, 1, 0, 0, i, 0, time.UTC),
		},
		Intent: IntentRunning,
		Lifecycle: lifecycle.Snapshot{
			Phase: lifecycle.PhaseReady, Since: time.Date(2026, 3, 1, 0, 1, i, 0, time.UTC),
			Transitions: []lifecycle.Record{{From: lifecycle.PhaseProvisioning, To: lifecycle.PhaseReady,
				At: time.Date(2026, 3, 1, 0, 1, i, 0, time.UTC)}},
		},
		SupervisorPID: 1000 + i,
		WorkloadPID:   2000 + i,
		InstanceID:    "inst-" + strconv.Itoa(i),
	}
}

func openTemp(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "state", "stockade.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func wantRecord(t *testing.T, s *Store, want Record) {
	t.Helper()
	got, err := s.Get(context.Background(), want.Spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision == 0 {
		t.Fatalf("record %s has revision 0 after a Put", want.Spec.Name)
	}
	want.Schema, want.Revision = SchemaVersion, got.Revision
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("record %s:\n got %+v\nwant %+v", want.Spec.Name, got, want)
	}
}

func TestRoundTrip(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	rec := testRecord(7)
	rec.KeepWorkspace = true
	rec.Intent = IntentStopped
	rec.Lifecycle.Reason = lifecycle.ReasonSessionLost
	rec.Lifecycle.NextRetry = time.Date(2026, 3, 1, 0, 2, 0, 0, time.UTC)
	if _, err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, rec)

	// Survives a close and reopen.
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	wantRecord(t, s2, rec)

	if err := s2.Delete(ctx, rec.Spec.Name, 1); err != nil {
		t.Fatal(err)
	}
	_, err = s2.Get(context.Background(), rec.Spec.Name)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `get sandbox "sb-00007": no such sandbox`) ||
		!strings.Contains(err.Error(), path) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s2.Delete(ctx, rec.Spec.Name, 1); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s2.Put(ctx, Record{Intent: IntentRunning}); err == nil || !strings.Contains(err.Error(), `sandbox name ""`) {
		t.Fatalf("put without a name: %v", err)
	}
	bad := testRecord(1)
	bad.Intent = 0
	if _, err := s2.Put(ctx, bad); err == nil || !strings.Contains(err.Error(), `put sandbox "sb-00001": store: intent 0 has no name`) {
		t.Fatalf("put without an intent: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s2.Put(cctx, testRecord(2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("put with a cancelled context: %v", err)
	}
	if _, err := s2.Get(context.Background(), testRecord(2).Spec.Name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a cancelled put wrote: %v", err)
	}
}

func TestListOrderAndBadRecords(t *testing.T) {
	s := openTemp(t)
	names := []string{"web", "api-2", "zed", "api", "db", "api-10"}
	for i, n := range names {
		r := testRecord(i)
		r.Spec.Name = n
		if _, err := s.Put(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Name())
	}
	want := []string{"api", "api-10", "api-2", "db", "web", "zed"} // byte order
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("List order %v, want %v", got, want)
	}

	// A record from a newer stockade and a corrupt one: Get names them,
	// List returns the rest and names both.
	raw := map[string]string{"db": `{"schema":2,"spec":{"name":"db"}}`, "api": `{"schema":1,`}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for k, v := range raw {
			if err := tx.Bucket(sandboxesBucket()).Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), "db"); err == nil || !strings.Contains(err.Error(), `get sandbox "db": decode: written by a newer stockade (schema 2; this one reads up to 1)`) {
		t.Errorf("newer schema: %v", err)
	}
	recs, err = s.List(context.Background())
	if len(recs) != 4 || err == nil || !strings.Contains(err.Error(), `list sandbox "api": decode`) ||
		!strings.Contains(err.Error(), `list sandbox "db": decode: written by a newer`) {
		t.Errorf("List with bad records: %d records, %v", len(recs), err)
	}
}

// TestInjectedWriteError: a write failing at the fault point returns the
// error and leaves the earlier record intact; the next write works.
func TestInjectedWriteError(t *testing.T) {
	faults := fault.NewSet()
	s := openTemp(t, WithFaults(faults))
	ctx := context.Background()
	v1 := testRecord(3)
	if _, err := s.Put(ctx, v1); err != nil {
		t.Fatal(err)
	}
	v2 := v1
	v2.Intent, v2.WorkloadPID, v2.Revision = IntentStopped, 4242, 1

	faults.Arm(PointWrite, fault.Rule{Kind: fault.KindError, Count: 2})
	_, err := s.Put(ctx, v2)
	want := fmt.Sprintf(`store %s: put sandbox "sb-00003": store.write: injected fault`, s.Path())
	if !errors.Is(err, fault.ErrInjected) || err.Error() != want {
		t.Fatalf("put:\n got %v\nwant %s", err, want)
	}
	wantRecord(t, s, v1)
	if err := s.Delete(ctx, v1.Spec.Name, 1); !errors.Is(err, fault.ErrInjected) || !strings.Contains(err.Error(), `delete sandbox "sb-00003"`) {
		t.Fatalf("delete: %v", err)
	}
	wantRecord(t, s, v1)
	if n := faults.Fired(PointWrite); n != 2 {
		t.Fatalf("fired %d, want 2", n)
	}
	if _, err := s.Put(ctx, v2); err != nil {
		t.Fatalf("put after the faults: %v", err)
	}
	wantRecord(t, s, v2)
}

func startChild(t *testing.T, mode, path string, env ...string) (*exec.Cmd, *bufio.Scanner, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{envChild + "=" + mode, envPath + "=" + path}, env...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if stderr.Len() > 0 {
			t.Logf("child stderr: %s", stderr.String())
		}
	})
	return cmd, bufio.NewScanner(out), in
}

// TestAckedWritesSurviveSIGKILL: a child puts records and prints "acked i"
// after each Put returns; the parent SIGKILLs it after a random number of
// acks (so mostly in the middle of the next write), reopens the file and
// finds every acked record, intact. Four rounds on the same file.
func TestAckedWritesSurviveSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stockade.db")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 3))
	next := 0
	for round := range 4 {
		killAfter := 1 + rnd.IntN(150)
		cmd, lines, _ := startChild(t, "put", path, fmt.Sprintf("%s=%d", envFirst, next))
		var acked []int
		for lines.Scan() {
			i, err := strconv.Atoi(strings.TrimPrefix(lines.Text(), "acked "))
			if err != nil {
				t.Fatalf("child said %q", lines.Text())
			}
			acked = append(acked, i)
			if len(acked) == killAfter {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v after %d acks, not by SIGKILL", round, err, len(acked))
		}
		if len(acked) < killAfter {
			t.Fatalf("round %d: child stopped after %d acks", round, len(acked))
		}
		s, err := Open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		for _, i := range acked {
			wantRecord(t, s, testRecord(i))
		}
		last := acked[len(acked)-1]
		latest, err := s.Get(context.Background(), "latest")
		if err != nil || latest.WorkloadPID < 2000+last {
			t.Fatalf("round %d: latest %+v (%v), want workload pid >= %d", round, latest.WorkloadPID, err, 2000+last)
		}
		if err := s.db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Fatalf("round %d: bbolt check: %v", round, err)
		}
		recs, err := s.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d acks (%d..%d); %d records on reopen", round, len(acked), acked[0], last, len(recs))
		next = latest.WorkloadPID - 2000 + 1
	}
}

// TestLockedByAnotherGateway: a second Open while a process holds the file
// fails with an error naming the state dir, the holder's pid and the file;
// once the holder exits, Open works.
// TestKillAfterWriteKWithConcurrentWriters: the crash tests' "kill after
// write K" (store.committed=kill) must leave exactly K+1 writes on disk even
// when other writers are committing at the same moment. A child puts
// records from eight goroutines with the kill armed; after its SIGKILL the
// file's transaction id is exactly K+1 past the one before the writes.
func TestKillAfterWriteKWithConcurrentWriters(t *testing.T) {
	for _, k := range []int{0, 5, 40} {
		path := filepath.Join(t.TempDir(), "stockade.db")
		cmd, out, _ := startChild(t, "racekill", path, envFirst+"="+strconv.Itoa(k))
		var base int
		if !out.Scan() {
			t.Fatalf("k=%d: the child printed nothing", k)
		}
		if _, err := fmt.Sscanf(out.Text(), "base %d", &base); err != nil {
			t.Fatalf("k=%d: child said %q: %v", k, out.Text(), err)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("k=%d: child exit %v, want death by SIGKILL", k, err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("k=%d: child exit %v, want death by SIGKILL", k, err)
		}
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var txid, n int
		err = db.View(func(tx *bolt.Tx) error {
			txid = tx.ID()
			n = tx.Bucket(sandboxesBucket()).Stats().KeyN
			return nil
		})
		_ = db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := txid - base; got != k+1 || n != k+1 {
			t.Fatalf("k=%d: the child died after %d writes (%d records), want %d", k, got, n, k+1)
		}
	}
}

func TestLockedByAnotherGateway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "stockade.db")
	cmd, lines, stdin := startChild(t, "hold", path)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("child: %q %v", lines.Text(), lines.Err())
	}
	start := time.Now()
	_, err := Open(path, WithLockTimeout(200*time.Millisecond))
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("open of a locked file: %v", err)
	}
	want := fmt.Sprintf("state dir %s is in use by another gateway (pid %d holds the lock on %s)", dir, cmd.Process.Pid, path)
	if err.Error() != want {
		t.Errorf("got  %q\nwant %q", err, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("lock timeout took %v", d)
	}
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	s, err := Open(path, WithLockTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatalf("open after the holder exited: %v", err)
	}
	_ = s.Close()
}

// TestRevisionConflict: a Put or Delete that read an older revision than
// the stored one (another writer came between) is refused and writes
// nothing; create (revision 0) over an existing record is refused too.
func TestRevisionConflict(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	rec := testRecord(5)
	rev, err := s.Put(ctx, rec)
	if err != nil || rev != 1 {
		t.Fatalf("first put: revision %d, %v", rev, err)
	}
	if _, err := s.Put(ctx, rec); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "stored revision 1, read 0") {
		t.Fatalf("create over an existing record: %v", err)
	}
	a, b := rec, rec
	a.Revision, b.Revision = 1, 1
	a.WorkloadPID, b.WorkloadPID = 111, 222
	if rev, err = s.Put(ctx, a); err != nil || rev != 2 {
		t.Fatalf("writer a: revision %d, %v", rev, err)
	}
	if _, err := s.Put(ctx, b); !errors.Is(err, ErrConflict) {
		t.Fatalf("writer b after a: %v, want a conflict", err)
	}
	if err := s.Delete(ctx, rec.Spec.Name, 1); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete with a stale revision: %v", err)
	}
	got, err := s.Get(ctx, rec.Spec.Name)
	if err != nil || got.WorkloadPID != 111 || got.Revision != 2 {
		t.Fatalf("after the refused writes: %+v, %v; want writer a's record at revision 2", got, err)
	}
	if err := s.Delete(ctx, rec.Spec.Name, 2); err != nil {
		t.Fatalf("delete at the current revision: %v", err)
	}
	if _, err := s.Get(ctx, rec.Spec.Name); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}
