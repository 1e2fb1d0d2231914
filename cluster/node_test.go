package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/etcdtest"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/store"
)

// events records a node's events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) count(k EventKind, name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := 0
	for _, ev := range e.evs {
		if ev.Kind == k && (name == "" || ev.Sandbox == name) {
			c++
		}
	}
	return c
}

type testNode struct {
	*Node
	ev *events
}

func join(t *testing.T, srv *etcdtest.Server, prefix, name string) testNode {
	t.Helper()
	ev := &events{}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := Join(ctx, Config{Endpoints: []string{srv.Endpoint}, Prefix: prefix, TTL: 2 * time.Second,
		Self: NodeInfo{Node: name, Host: "h1", API: fmt.Sprintf("127.0.0.1:%d", 7000+int(name[0]))}, Log: zerolog.New(&testenv.Buffer{})}, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return testNode{n, ev}
}

// kill ends a node's loops without revoking its lease, as SIGKILL would.
func (n *Node) kill() {
	n.cancel()
	<-n.done
}

func rec(name string) store.Record {
	return store.Record{Spec: store.Spec{Name: name, UID: fmt.Sprintf("%x", name), PolicyVersion: 1, Argv: []string{"sleep"}, Created: time.Now()},
		Intent: store.IntentRunning, Lifecycle: lifecycle.Snapshot{Phase: lifecycle.PhaseReady, Since: time.Now()}}
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// owners reads every owner key straight from etcd.
func owners(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	resp, err := cli.Get(ctx5(t), prefix+"owners/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key[len(prefix+"owners/"):])] = string(kv.Value)
	}
	return out
}

func TestPlaceSpreadsAndIsStable(t *testing.T) {
	nodes := []string{"a", "b", "c"}
	count := map[string]int{}
	for i := range 300 {
		count[place(fmt.Sprintf("sb-%d", i), nodes)]++
	}
	for _, n := range nodes {
		if count[n] < 60 {
			t.Fatalf("placement is uneven: %v", count)
		}
	}
	// Removing a node moves only its own sandboxes.
	for i := range 300 {
		name := fmt.Sprintf("sb-%d", i)
		before, after := place(name, nodes), place(name, []string{"a", "c"})
		if before != "b" && before != after {
			t.Fatalf("%s moved from %s to %s when b left", name, before, after)
		}
	}
	if place("x", nil) != "" {
		t.Fatal("no node must place nowhere")
	}
}

// Three nodes: creates through one node are fenced to it; killing the
// owner moves its sandboxes to a survivor within a few TTLs; the killed
// node's writes are refused by etcd even when it believes its lease good.
func TestOwnershipFailoverAndFencing(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/t/failover/"
	a, b, c := join(t, srv, prefix, "a"), join(t, srv, prefix, "b"), join(t, srv, prefix, "c")
	testenv.Eventually(t, 5*time.Second, func() bool { return len(a.Nodes()) == 3 && len(c.Nodes()) == 3 }, "every node sees three")

	const n = 12
	revs := map[string]uint64{}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		rev, err := a.Store().Put(ctx5(t), rec(name))
		if err != nil {
			t.Fatal(err)
		}
		revs[name] = rev
	}
	// A create of an existing name conflicts and writes nothing.
	if _, err := b.Store().Put(ctx5(t), rec("s0")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	// b may not write a's sandbox.
	r := rec("s1")
	r.Revision = revs["s1"]
	if _, err := b.Store().Put(ctx5(t), r); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("non-owner write: %v, want ErrNotOwner", err)
	}
	if got := len(a.Owned()); got != n {
		t.Fatalf("a owns %d, want %d", got, n)
	}
	// a's owner writes work.
	rev, err := a.Store().Put(ctx5(t), r)
	if err != nil {
		t.Fatal(err)
	}
	revs["s1"] = rev

	killed := time.Now()
	a.kill()
	testenv.Eventually(t, 10*time.Second, func() bool {
		o := owners(t, b.Client(), prefix)
		if len(o) != n {
			return false
		}
		for _, node := range o {
			if node == "a" {
				return false
			}
		}
		return true
	}, "every sandbox owned by a survivor")
	t.Logf("all %d sandboxes moved %s after the kill (TTL 2s)", n, time.Since(killed).Round(10*time.Millisecond))
	// etcd has the claims; each survivor records its own when its claim's
	// answer arrives (claims run side by side).
	testenv.Eventually(t, 5*time.Second, func() bool { return len(b.Owned())+len(c.Owned()) == n },
		"survivors to own %d (they own %d)", n, len(b.Owned())+len(c.Owned()))
	if b.ev.count(Own, "")+c.ev.count(Own, "") < n {
		t.Fatalf("survivors were told to drive %d+%d sandboxes, want %d", b.ev.count(Own, ""), c.ev.count(Own, ""), n)
	}
	// The killed node wakes believing its lease good (a zombie): etcd
	// refuses its write by the fencing token, and counts it.
	a.mu.Lock()
	a.validUntil = time.Now().Add(time.Hour)
	a.mine["s1"] = int64(revs["s1"]) // any stale token
	a.mu.Unlock()
	before := a.Refused()
	r.Revision = revs["s1"]
	if _, err := a.Store().Put(ctx5(t), r); !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("zombie write: %v, want ErrNotOwner", err)
	}
	if a.Refused() != before+1 {
		t.Fatalf("refused count %d, want %d", a.Refused(), before+1)
	}
	got, err := b.Store().Get(ctx5(t), "s1")
	if err != nil || got.Revision != revs["s1"] {
		t.Fatalf("s1 changed under the zombie's write: rev %d (want %d), %v", got.Revision, revs["s1"], err)
	}
}

// A node that cannot renew stops driving before its TTL can expire:
// Fenced is emitted and its writes are refused locally.
func TestSelfFence(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/t/fence/"
	a := join(t, srv, prefix, "a")
	if _, err := a.Store().Put(ctx5(t), rec("x")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(19); err != nil { // SIGSTOP etcd: renewals hang
		t.Fatal(err)
	}
	stopped := time.Now()
	testenv.Eventually(t, 5*time.Second, func() bool { return a.ev.count(Fenced, "") > 0 }, "the node fences itself")
	took := time.Since(stopped)
	if took > 2*time.Second {
		t.Fatalf("fenced %s after renewals stopped: not before the 2s TTL", took)
	}
	t.Logf("fenced %s after etcd stopped answering (TTL 2s)", took.Round(10*time.Millisecond))
	if a.Owns("x") {
		t.Fatal("a fenced node still says it owns x")
	}
	if err := srv.Signal(18); err != nil { // SIGCONT
		t.Fatal(err)
	}
}

// Nodes started at the same moment never both own a sandbox.
func TestSimultaneousStartOneOwner(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/t/together/"
	seed := join(t, srv, prefix, "seed")
	for i := range 20 {
		if _, err := seed.Store().Put(ctx5(t), rec(fmt.Sprintf("t%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	seed.kill()
	// Wait out the seed's lease: the sandboxes are unowned.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(owners(t, seed.Client(), prefix)) == 0 }, "the seed's ownership expires")
	var wg sync.WaitGroup
	nodes := make([]testNode, 3)
	for i := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); nodes[i] = join(t, srv, prefix, fmt.Sprintf("n%d", i)) }()
	}
	wg.Wait()
	testenv.Eventually(t, 10*time.Second, func() bool { return len(owners(t, seed.Client(), prefix)) == 20 }, "every sandbox owned")
	// No sandbox is ever believed owned by two nodes, and each node's
	// belief comes to match etcd: claims run side by side, so etcd holds
	// a claim a moment before the node that made it records it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o := owners(t, seed.Client(), prefix)
		believed := map[string]string{}
		for _, n := range nodes {
			for _, s := range n.Owned() {
				if prev, dup := believed[s]; dup {
					t.Fatalf("%s is owned by both %s and %s", s, prev, n.Self().Node)
				}
				believed[s] = n.Self().Node
			}
		}
		mismatch := ""
		for s, node := range o {
			if believed[s] != node {
				mismatch = fmt.Sprintf("%s: etcd says %s, nodes believe %q", s, node, believed[s])
				break
			}
		}
		if mismatch == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, %s", mismatch)
		}
	}
}

// The store's fault points reach the cluster's store: an injected write
// error writes nothing, and the next write works.
func TestStoreFaultPoint(t *testing.T) {
	srv := etcdtest.Start(t)
	faults := fault.NewSet()
	ev := &events{}
	n, err := Join(ctx5(t), Config{Endpoints: []string{srv.Endpoint}, Prefix: "/t/faults/", TTL: 2 * time.Second, Faults: faults,
		Self: NodeInfo{Node: "a", Host: "h1", API: "127.0.0.1:1"}, Log: zerolog.New(&testenv.Buffer{})}, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if _, err := faults.Apply("store.write=error:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Store().Put(ctx5(t), rec("f")); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("armed write: %v, want the injected error", err)
	}
	if _, err := n.Store().Get(ctx5(t), "f"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the failed create: %v, want not found", err)
	}
	if _, err := n.Store().Put(ctx5(t), rec("f")); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

// A node joins an etcd that serves TLS and requires client certificates
// with its certificate; an attacker with a certificate of another CA, or
// with none, is refused and writes nothing.
func TestJoinOverTLS(t *testing.T) {
	srv := etcdtest.StartTLS(t)
	cfg := func(name string, tc *tls.Config) Config {
		return Config{Endpoints: []string{srv.Endpoint}, Prefix: "/t/tls/", TTL: 2 * time.Second, TLS: tc, DialTimeout: 2 * time.Second,
			Self: NodeInfo{Node: name, Host: "h1", API: "127.0.0.1:1"}, Log: zerolog.New(&testenv.Buffer{})}
	}
	n, err := Join(ctx5(t), cfg("good", srv.TLS.Client(t)), nil)
	if err != nil {
		t.Fatalf("join with the accepted client certificate: %v", err)
	}
	t.Cleanup(func() { _ = n.Close() })
	if _, err := n.Store().Put(ctx5(t), rec("x")); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]*tls.Config{
		"other-ca":  srv.TLS.Other(t),
		"no-cert":   {RootCAs: srv.TLS.Client(t).RootCAs, MinVersion: tls.VersionTLS12},
		"plaintext": nil,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		bad, err := Join(ctx, cfg("evil-"+name, tc), nil)
		cancel()
		if err == nil {
			_ = bad.Close()
			t.Fatalf("%s: joined an etcd that requires client certificates", name)
		}
		t.Logf("%s: refused: %v", name, err)
	}
	if got := len(n.Nodes()); got != 1 {
		t.Fatalf("nodes after the refused joins: %d, want 1 (%v)", got, n.Nodes())
	}
}

// TestKeysNoNodeWritesAreRefused plays a local user who can write the
// cluster's etcd: a record whose key and name are a path, in phase
// Deleting (a node that drove it would remove that path as root), an
// owner key for a path, and a node entry whose API address is not one.
// The node refuses each (counted, logged), never claims or drives the
// record, and keeps working: a good record written after them is seen.
func TestKeysNoNodeWritesAreRefused(t *testing.T) {
	srv := etcdtest.Start(t)
	const prefix = "/t/untrusted/"
	a := join(t, srv, prefix, "a")
	cli := a.records.Client()

	evil := rec("x")
	evil.Spec.Name = "../../tmp/victim"
	evil.Intent = store.IntentDeleted
	evil.Lifecycle.Phase = lifecycle.PhaseDeleting
	evil.Schema = store.SchemaVersion
	b, err := json.Marshal(evil)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(NodeInfo{Node: "evil", Host: "h1", API: "evil"})
	for k, v := range map[string]string{
		prefix + "sandboxes/" + evil.Spec.Name: string(b),
		prefix + "owners/../../x":              "a",
		prefix + "nodes/evil":                  string(info),
	} {
		if _, err := cli.Put(ctx5(t), k, v); err != nil {
			t.Fatal(err)
		}
	}
	// A valid record with no owner, written the same way after them: once
	// the node has claimed it, its claim loop has seen the refused ones.
	bait := rec("bait")
	bait.Host, bait.Schema = "h1", store.SchemaVersion
	bb, err := json.Marshal(bait)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx5(t), prefix+"sandboxes/bait", string(bb)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*a.ttl, func() bool { return a.ev.count(Own, "bait") == 1 }, "the node claims the unowned good record")
	if got := a.Stats().Refused(); got != 3 {
		t.Fatalf("%d keys refused, want 3", got)
	}
	if w := a.Locate(evil.Spec.Name); w.Exists || w.HasOwner {
		t.Fatalf("the refused record is in the view: %+v", w)
	}
	if n := a.ev.count(Own, evil.Spec.Name); n != 0 {
		t.Fatalf("the node drives the refused record (%d Own events)", n)
	}
	for _, node := range a.Nodes() {
		if node.Node == "evil" {
			t.Fatalf("the refused node entry is in the view: %+v", node)
		}
	}
	if o := owners(t, cli, prefix); o[evil.Spec.Name] != "" {
		t.Fatalf("the node claimed the refused record: %v", o)
	}
}
