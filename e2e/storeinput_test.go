package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/store"
)

// victim is a directory outside the state dir that an attacker wants the
// gateway (root) to delete, with a file in it and a `workspace` link to a
// second directory of the attacker's (a gateway that drove the record
// would make its files there).
type victim struct {
	dir, linked string
}

func newVictim(t *testing.T) victim {
	t.Helper()
	v := victim{dir: t.TempDir(), linked: t.TempDir()}
	write(t, filepath.Join(v.dir, "keep"), "precious")
	if err := os.Symlink(v.linked, filepath.Join(v.dir, contract.WorkspaceDir)); err != nil {
		t.Fatal(err)
	}
	return v
}

// name is the store key that, joined under state's sandboxes dir, is the
// victim's directory.
func (v victim) name(t *testing.T, state string) string {
	t.Helper()
	rel, err := filepath.Rel(contract.StateDir(state).Sandboxes(), v.dir)
	if err != nil || !strings.HasPrefix(rel, "..") {
		t.Fatalf("victim %s is not outside %s: %q %v", v.dir, state, rel, err)
	}
	return rel
}

// record is a record of the victim in phase Deleting: a gateway that drove
// it would finish the delete by removing the sandbox's directory.
func (v victim) record(t *testing.T, name string) []byte {
	t.Helper()
	r := store.Record{Schema: store.SchemaVersion, Revision: 1, Intent: store.IntentDeleted,
		Spec:      store.Spec{Name: name, UID: "0123456789abcdef", PolicyVersion: 1, Argv: []string{"sleep", "1"}, Created: time.Now()},
		Lifecycle: lifecycle.Snapshot{Phase: lifecycle.PhaseDeleting, Since: time.Now()}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// untouched fails t unless the victim is as it was made: its file, its
// link, nothing new in it or in the linked directory.
func (v victim) untouched(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(v.dir, "keep")); err != nil || string(b) != "precious" {
		t.Errorf("the victim's file: %q %v", b, err)
	}
	for dir, want := range map[string][]string{v.dir: {"keep", contract.WorkspaceDir}, v.linked: nil} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s holds %v, want %v", dir, got, want)
		}
	}
}

// TestStoreRecordIsNotAPath plays a local user who can write the gateway's
// state file: a record under a key that, joined under the state dir, is a
// directory of the attacker's choosing, in phase Deleting. The gateway
// refuses the record (logged, named), drives no sandbox from it, leaves it
// in the store, and touches nothing outside its state dir; other
// sandboxes work.
func TestStoreRecordIsNotAPath(t *testing.T) {
	w := prepareWorld(t, 0)
	v := newVictim(t)
	name := v.name(t, w.state)
	raw := v.record(t, name)
	st, err := store.Open(contract.StateDir(w.state).Store())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	putRaw := func(key string, val []byte) {
		db, err := bolt.Open(contract.StateDir(w.state).Store(), 0o600, &bolt.Options{Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("sandboxes")).Put([]byte(key), val) }); err != nil {
			t.Fatal(err)
		}
	}
	putRaw(name, raw)
	w.startGateway()
	t.Cleanup(w.shutdown)

	testenv.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(w.gwLog.String(), "refused: not a record this gateway writes")
	}, "the gateway logs the refused record:\n%s", w.gwLog.Tail(20))
	if log := w.gwLog.String(); !strings.Contains(log, strings.ReplaceAll(name, `"`, `\"`)) {
		t.Errorf("the refusal does not name the key %q:\n%s", name, w.gwLog.Tail(20))
	}
	w.create("ok", "sleep 600")
	out, _, code := w.cli("list")
	if code != 0 || strings.Contains(out, "..") || !strings.Contains(out, "ok") {
		t.Errorf("list (exit %d):\n%s", code, out)
	}
	v.untouched(t)
	w.shutdown()
	db, err := bolt.Open(contract.StateDir(w.state).Store(), 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket([]byte("sandboxes")).Get([]byte(name)); string(got) != string(raw) {
			t.Errorf("the refused record changed: %q", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterKeyIsNotAPath is the same through a cluster's etcd: the
// attacker holds a client certificate etcd accepts (without one, etcd,
// run as cluster init says, refuses the write: shown first) and writes a
// record under <prefix>/sandboxes/../../<victim>. The node refuses it
// (counted, logged), never claims or drives it, and the victim is
// untouched.
func TestClusterKeyIsNotAPath(t *testing.T) {
	c := newClusterWorld(t, 1)
	nd := c.nodes[0]
	v := newVictim(t)
	name := v.name(t, c.state)
	key := "/stockade/sandboxes/" + name

	dial := func(withCert bool) *clientv3.Client {
		cfg := c.etcd.TLS.Client(t)
		if !withCert {
			cfg.Certificates = nil
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd.Endpoint}, TLS: cfg, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	put := func(cli *clientv3.Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, key, string(v.record(t, name)))
		return err
	}
	if err := put(dial(false)); err == nil {
		t.Fatal("etcd took a write from a client without a certificate")
	}
	before := metricsOf(t, nd.proc.Addrs.Metrics)["stockade_cluster_refused_keys_total"]
	if err := put(dial(true)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		return metricsOf(t, nd.proc.Addrs.Metrics)["stockade_cluster_refused_keys_total"] == before+1
	}, "the node counts the refused key")
	if !strings.Contains(nd.proc.Log.String(), "refused a key no node writes") {
		t.Errorf("the node does not log the refusal:\n%s", nd.proc.Log.Tail(20))
	}
	// A create through the node works (and its claim loop has run since).
	c.createMany("ok", 1)
	v.untouched(t)
	if out, _, _ := c.via(nd, "list"); strings.Contains(out, "..") {
		t.Errorf("list shows the refused record:\n%s", out)
	}
}

// TestPlainEtcdNeedsInsecure: a node refuses http:// etcd endpoints unless
// --etcd-insecure names the risk.
func TestPlainEtcdNeedsInsecure(t *testing.T) {
	out, err := exec.Command(bin, "gateway", "run", "--etcd", "http://127.0.0.1:1", "--node", "n1",
		"--state-dir", t.TempDir(), "--listen", "127.0.0.1:0").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "--etcd-insecure") || !strings.Contains(string(out), "stockade cluster init") {
		t.Fatalf("gateway run with plain http etcd: %v\n%s", err, out)
	}
}
