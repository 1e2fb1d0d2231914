package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/store/etcdstore"
)

// DefaultPrefix is the cluster's key prefix when Config.Prefix is empty.
const DefaultPrefix = "/stockade/"

// DefaultTTL is a node's lease TTL when Config.TTL is 0: a killed node's
// sandboxes are claimed by another node within about this long.
const DefaultTTL = 3 * time.Second

// NodeInfo is what a node publishes about itself under nodes/NODE.
type NodeInfo struct {
	Node string `json:"node"`
	// Host names the machine the node runs on: sandboxes created through
	// it live there, and only nodes of that host drive them.
	Host string `json:"host"`
	// API is the node's API address (clients, supervisors, other nodes).
	API string `json:"api"`
	// Relay is the node's SSH relay address.
	Relay string `json:"relay"`
}

// Config configures a node's membership.
type Config struct {
	// Endpoints are etcd's client URLs.
	Endpoints []string
	// Prefix starts every key (DefaultPrefix when empty).
	Prefix string
	// Self is this node.
	Self NodeInfo
	// TTL is the node's lease TTL, whole seconds, at least 2 (etcd's
	// minimum); DefaultTTL when 0.
	TTL time.Duration
	// TLS is the etcd client's TLS configuration (https endpoints; a
	// client certificate when etcd asks for one); nil: plain http.
	TLS *tls.Config
	// DialTimeout bounds connecting to etcd (5 s when 0).
	DialTimeout time.Duration
	Log         zerolog.Logger
	// Stats receives the node's counters (nil: fresh ones, see Node.Stats).
	Stats *Stats
	// Faults is asked at the store's points before and after each record
	// write (store.PointWrite, store.PointCommitted); nil: none.
	Faults fault.Injector
}

// Event tells the node's sandboxes actor what to drive.
type Event struct {
	Kind EventKind
	// Sandbox is the sandbox of Own and Disown.
	Sandbox string
}

// EventKind is the kind of an Event.
type EventKind int

// Event kinds.
const (
	// Own: this node now owns Sandbox (it claimed it): drive it (adopt
	// its supervisor, or start one).
	Own EventKind = 1
	// Disown: this node lost Sandbox (another node owns it, or its owner
	// key is gone): stop driving it, leave its supervisor alone.
	Disown EventKind = 2
	// Fenced: this node's lease is not renewed in time: stop driving
	// every sandbox now, before the lease can expire at etcd.
	Fenced EventKind = 3
)

func (k EventKind) String() string {
	switch k {
	case Own:
		return "own"
	case Disown:
		return "disown"
	case Fenced:
		return "fenced"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// owner is an owner key as the watch last saw it.
type owner struct {
	node  string
	lease clientv3.LeaseID
	token int64 // the key's CreateRevision
}

// Node is this gateway node's membership. Its methods are safe for
// concurrent use.
type Node struct {
	cfg     Config
	cli     *clientv3.Client
	records *etcdstore.Store
	log     zerolog.Logger
	prefix  string
	ttl     time.Duration

	mu sync.Mutex
	// lease is this node's current lease; validUntil is when it stops
	// driving unless a renewal succeeds first.
	lease      clientv3.LeaseID
	validUntil time.Time
	fenced     bool // the last check found the lease not renewed
	// The watched view of the prefix, as of revision seen.
	seen    int64
	nodes   map[string]NodeInfo
	owners  map[string]owner
	recs    map[string]store.Record
	unowned map[string]time.Time // sandbox -> since when it has no owner
	// mine are the sandboxes this node owns, with their tokens.
	mine map[string]int64
	// revoked are the revoked client certificates' serials (hex).
	revoked map[string]bool
	// clients are the client records (clients.go).
	clients *store.ClientIndex
	notify  func(Event)

	stats  *Stats
	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Join connects to etcd, takes a lease, publishes this node (waiting up to
// a TTL for a previous incarnation's key of the same name to expire), reads
// the prefix and starts renewing, watching and claiming. notify receives
// the node's events (from the node's goroutines; it must not block).
func Join(ctx context.Context, cfg Config, notify func(Event)) (*Node, error) {
	if cfg.Self.Node == "" || cfg.Self.API == "" {
		return nil, errors.New("cluster: join: the node needs a name and an API address")
	}
	// Other nodes refuse a node entry that does not validate: so does Join.
	if err := cfg.Self.validate(cfg.Self.Node); err != nil {
		return nil, fmt.Errorf("cluster: join: %w (name the node with --node, its host with --host-id)", err)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 2*time.Second || cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("cluster: lease TTL %s: use whole seconds, at least 2s (etcd's minimum)", cfg.TTL)
	}
	if cfg.Stats == nil {
		cfg.Stats = NewStats()
	}
	if cfg.Faults == nil {
		cfg.Faults = fault.Nop{}
	}
	recs, err := etcdstore.Open(ctx, etcdstore.Config{Endpoints: cfg.Endpoints, Prefix: cfg.Prefix + "sandboxes/", DialTimeout: cfg.DialTimeout, TLS: cfg.TLS})
	if err != nil {
		return nil, fmt.Errorf("cluster: cannot use etcd at %s: %w (is it running and reachable? for an https endpoint give --etcd-cacert, and --etcd-cert/--etcd-key when it requires client certificates)", strings.Join(cfg.Endpoints, ","), err)
	}
	n := &Node{cfg: cfg, cli: recs.Client(), records: recs, log: cfg.Log, prefix: cfg.Prefix, ttl: cfg.TTL,
		nodes: map[string]NodeInfo{}, owners: map[string]owner{}, recs: map[string]store.Record{},
		unowned: map[string]time.Time{}, mine: map[string]int64{}, revoked: map[string]bool{}, clients: store.NewClientIndex(nil), notify: notify, stats: cfg.Stats, kick: make(chan struct{}, 1),
		done: make(chan struct{})}
	if err := n.register(ctx); err != nil {
		_ = recs.Close()
		return nil, err
	}
	rev, err := n.load(ctx)
	if err != nil {
		_ = recs.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); n.renewLoop(rctx) }()
	go func() { defer wg.Done(); n.watchLoop(rctx, rev) }()
	go func() { defer wg.Done(); n.claimLoop(rctx) }()
	go func() { wg.Wait(); close(n.done) }()
	n.log.Info().Str("node", cfg.Self.Node).Str("host", cfg.Self.Host).Int64("lease", int64(n.leaseID())).
		Dur("ttl", cfg.TTL).Int("nodes", len(n.Nodes())).Msg("joined the cluster")
	return n, nil
}

func (n *Node) key(kind, name string) string { return n.prefix + kind + "/" + name }

// register takes a new lease and publishes this node under it. A key of
// the same node name under another live lease is a previous incarnation
// (killed, its lease not yet expired) or another process with the same
// --node: it is waited for up to a TTL and a half, then refused.
func (n *Node) register(ctx context.Context) error {
	info, err := json.Marshal(n.cfg.Self)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	nodeKey := n.key("nodes", n.cfg.Self.Node)
	deadline := time.Now().Add(n.ttl * 3 / 2)
	for {
		sent := time.Now()
		g, err := n.cli.Grant(ctx, int64(n.ttl/time.Second))
		if err != nil {
			return fmt.Errorf("cluster: grant a lease at etcd %s: %w", strings.Join(n.cfg.Endpoints, ","), err)
		}
		resp, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(nodeKey), "=", 0)).
			Then(clientv3.OpPut(nodeKey, string(info), clientv3.WithLease(g.ID))).Commit()
		if err != nil {
			return fmt.Errorf("cluster: publish node %s: %w", n.cfg.Self.Node, err)
		}
		if resp.Succeeded {
			n.mu.Lock()
			n.lease, n.validUntil, n.fenced = g.ID, sent.Add(n.margin(time.Duration(g.TTL)*time.Second)), false
			n.mu.Unlock()
			return nil
		}
		_, _ = n.cli.Revoke(ctx, g.ID)
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: node %s is already live in the cluster (another process runs with --node %s; give each node its own name)", n.cfg.Self.Node, n.cfg.Self.Node)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: publish node %s: %w", n.cfg.Self.Node, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// margin is how long after sending a successful renewal the node keeps
// driving: two thirds of the granted TTL, so it stops a third of a TTL
// before etcd (which counts from when it received the renewal) can expire
// the lease and let another node claim.
func (n *Node) margin(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// load reads the whole prefix at one revision and returns it.
func (n *Node) load(ctx context.Context) (int64, error) {
	resp, err := n.cli.Get(ctx, n.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("cluster: read %s: %w", n.prefix, err)
	}
	n.mu.Lock()
	n.nodes, n.owners, n.recs = map[string]NodeInfo{}, map[string]owner{}, map[string]store.Record{}
	for _, kv := range resp.Kvs {
		n.applyPut(kv)
	}
	n.seen = resp.Header.Revision
	now := time.Now()
	for name := range n.recs {
		if _, ok := n.owners[name]; !ok {
			if _, ok := n.unowned[name]; !ok {
				n.unowned[name] = now
			}
		}
	}
	n.mu.Unlock()
	return resp.Header.Revision, nil
}

// applyPut records a key's new value (n.mu held). Every key and value is
// untrusted input (whoever can write etcd wrote it): one that is not what
// a node writes is refused, logged and left out of the view, so nothing
// acts on it (a sandbox name from a key becomes a path when a node drives
// it).
func (n *Node) applyPut(kv *mvccpb.KeyValue) {
	kind, name, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), n.prefix), "/")
	if !ok {
		return
	}
	refuse := func(err error) {
		n.log.Error().Err(err).Str("key", string(kv.Key)).Msg("cluster: refused a key no node writes; it is left in etcd and ignored")
		n.stats.refused.Add(1)
	}
	switch kind {
	case "nodes":
		var info NodeInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			refuse(err)
			return
		}
		if err := info.validate(name); err != nil {
			refuse(err)
			return
		}
		n.nodes[name] = info
	case "owners":
		if err := errors.Join(contract.CheckName(name), contract.CheckHostName("owner node", string(kv.Value))); err != nil {
			refuse(err)
			return
		}
		n.owners[name] = owner{node: string(kv.Value), lease: clientv3.LeaseID(kv.Lease), token: kv.CreateRevision}
		delete(n.unowned, name)
	case "clients":
		n.applyClient(kv.Value)
	case "sandboxes":
		rec, err := etcdstore.DecodeKV(name, kv.Value, kv.ModRevision)
		if err != nil {
			refuse(err)
			return
		}
		n.recs[name] = rec
		if _, ok := n.owners[name]; !ok {
			if _, ok := n.unowned[name]; !ok {
				n.unowned[name] = time.Now()
			}
		}
	}
}

// validate checks a node's published info, stored under nodes/name.
func (i NodeInfo) validate(name string) error {
	if i.Node != name {
		return fmt.Errorf("stored under %q but names node %q", name, i.Node)
	}
	errs := []error{contract.CheckHostName("node", i.Node), contract.CheckHostName("host", i.Host)}
	if err := store.CheckAddr(i.API); err != nil {
		errs = append(errs, fmt.Errorf("api address: %w", err))
	}
	if i.Relay != "" {
		if err := store.CheckAddr(i.Relay); err != nil {
			errs = append(errs, fmt.Errorf("relay address: %w", err))
		}
	}
	return errors.Join(errs...)
}

// applyDelete records a key's removal (n.mu held).
func (n *Node) applyDelete(kv *mvccpb.KeyValue) {
	kind, name, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), n.prefix), "/")
	if !ok {
		return
	}
	switch kind {
	case "nodes":
		delete(n.nodes, name)
	case "owners":
		delete(n.owners, name)
		if _, ok := n.recs[name]; ok {
			n.unowned[name] = time.Now()
		}
	case "sandboxes":
		delete(n.recs, name)
		delete(n.unowned, name)
	}
}

// watchLoop keeps the view current from revision rev+1; when the watch
// fails (etcd compacted past it, or the watch ends), the prefix is read
// again and watched from there.
func (n *Node) watchLoop(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := n.cli.Watch(wctx, n.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				n.log.Warn().Err(err).Msg("cluster: watch failed; reading the prefix again")
				break
			}
			n.mu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					n.applyDelete(ev.Kv)
					continue
				}
				n.applyPut(ev.Kv)
			}
			if wr.Header.Revision > n.seen {
				n.seen = wr.Header.Revision
			}
			rev = n.seen
			n.mu.Unlock()
			n.poke()
		}
		cancel()
		for ctx.Err() == nil {
			lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
			r, err := n.load(lctx)
			lcancel()
			if err == nil {
				rev = r
				n.poke()
				break
			}
			n.log.Warn().Err(err).Msg("cluster: cannot read the prefix; retrying")
			sleep(ctx, 500*time.Millisecond)
		}
	}
}

func (n *Node) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// renewLoop renews the lease every third of a TTL. A renewal that fails is
// retried; the self-fence check (claimLoop) stops the node driving once
// validUntil passes. A lease that etcd no longer knows (it expired while
// the node was paused or cut off) is replaced: the node publishes itself
// again and owns nothing until it claims again.
func (n *Node) renewLoop(ctx context.Context) {
	every := n.ttl / 3
	for ctx.Err() == nil {
		sent := time.Now()
		lease := n.leaseID()
		rctx, cancel := context.WithTimeout(ctx, every)
		resp, err := n.cli.KeepAliveOnce(rctx, lease)
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			n.mu.Lock()
			if n.lease == lease {
				n.validUntil = sent.Add(n.margin(time.Duration(resp.TTL) * time.Second))
			}
			n.mu.Unlock()
		case errors.Is(err, rpctypes.ErrLeaseNotFound) || (err == nil && resp.TTL <= 0):
			n.log.Warn().Int64("lease", int64(lease)).Msg("cluster: this node's lease expired (paused or cut off); dropping every sandbox and joining again")
			n.stats.leaseLosses.Add(1)
			n.loseAll()
			rctx, cancel := context.WithTimeout(ctx, n.ttl*2)
			if err := n.register(rctx); err != nil {
				n.log.Error().Err(err).Msg("cluster: join again")
			}
			cancel()
			n.poke()
			continue
		case ctx.Err() == nil:
			n.log.Warn().Err(err).Msg("cluster: lease renewal failed")
		}
		if d := time.Until(sent.Add(every)); d > 0 {
			sleep(ctx, d)
		}
	}
}

// loseAll forgets every sandbox this node owned and tells the actors.
func (n *Node) loseAll() {
	n.mu.Lock()
	n.mine = map[string]int64{}
	n.fenced = true
	n.validUntil = time.Time{}
	n.mu.Unlock()
	n.emit(Event{Kind: Fenced})
}

func (n *Node) emit(e Event) {
	if n.notify != nil {
		n.notify(e)
	}
}

func (n *Node) leaseID() clientv3.LeaseID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lease
}

// Valid reports whether this node may drive its sandboxes now: its last
// renewal was sent recently enough that etcd cannot have expired the
// lease yet.
func (n *Node) Valid() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.validUntil)
}

// claimLoop checks the self-fence every 100 ms, and on every change of the
// view (and every 500 ms) reconciles what this node owns: it claims the
// unowned sandboxes placement gives it, and drops the ones it lost.
func (n *Node) claimLoop(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		case <-t.C:
			if n.checkFence() || time.Since(last) < 500*time.Millisecond {
				continue
			}
		}
		last = time.Now()
		n.reconcile(ctx)
	}
}

// checkFence emits Fenced once when validUntil passes; it reports whether
// the node is fenced.
func (n *Node) checkFence() bool {
	n.mu.Lock()
	if time.Now().Before(n.validUntil) {
		n.fenced = false
		n.mu.Unlock()
		return false
	}
	was := n.fenced
	n.fenced = true
	lost := len(n.mine)
	n.mine = map[string]int64{}
	n.mu.Unlock()
	if !was {
		n.stats.selfFences.Add(1)
		n.log.Warn().Int("sandboxes", lost).Msg("cluster: lease not renewed in time; this node stops driving its sandboxes (self-fence)")
		n.emit(Event{Kind: Fenced})
	}
	return true
}

// reconcile claims what placement gives this node and drops what it lost.
func (n *Node) reconcile(ctx context.Context) {
	if n.checkFence() {
		return
	}
	n.mu.Lock()
	self := n.cfg.Self.Node
	var lost, claim, adopt []string
	for name, tok := range n.mine {
		o, ok := n.owners[name]
		if tok > n.seen {
			continue // claimed after the view's revision: the watch has not caught up
		}
		if !ok || o.token != tok {
			lost = append(lost, name)
			delete(n.mine, name)
		}
	}
	for name, o := range n.owners {
		if _, ok := n.mine[name]; !ok && o.node == self && o.lease == n.lease {
			// Ours under the current lease but not driven: a self-fence
			// that ended before the lease expired.
			n.mine[name] = o.token
			adopt = append(adopt, name)
		}
	}
	for name, since := range n.unowned {
		rec, ok := n.recs[name]
		if !ok || rec.Host != n.cfg.Self.Host {
			continue
		}
		winner := place(name, n.liveOn(rec.Host))
		// The winner claims; if it has not within two TTLs (it is
		// starting, or its view differs), any node of the host does.
		if winner == self || time.Since(since) > 2*n.ttl {
			claim = append(claim, name)
		}
	}
	n.mu.Unlock()
	for _, name := range lost {
		n.log.Warn().Str("sandbox", name).Msg("cluster: ownership lost; no longer driving it")
		n.emit(Event{Kind: Disown, Sandbox: name})
	}
	for _, name := range adopt {
		n.emit(Event{Kind: Own, Sandbox: name})
	}
	sort.Strings(claim)
	// Claims run side by side: etcd commits concurrent transactions
	// together (one fsync for many), so a lost node's hundred sandboxes
	// are claimed in about the time of a few sequential ones.
	sem := make(chan struct{}, claimParallel)
	var wg sync.WaitGroup
	for _, name := range claim {
		if ctx.Err() != nil || !n.Valid() {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n.claim(ctx, name)
		}()
	}
	wg.Wait()
}

// claimParallel bounds the claim transactions in flight.
const claimParallel = 32

// claim makes this node the owner of an unowned sandbox: a transaction that
// creates its owner key under this node's lease only if there is none and
// the record exists.
func (n *Node) claim(ctx context.Context, name string) {
	lease := n.leaseID()
	ok := n.key("owners", name)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := n.cli.Txn(cctx).If(
		clientv3.Compare(clientv3.CreateRevision(ok), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(n.records.Key(name)), ">", 0),
	).Then(clientv3.OpPut(ok, n.cfg.Self.Node, clientv3.WithLease(lease))).Commit()
	if err != nil {
		n.log.Warn().Err(err).Str("sandbox", name).Msg("cluster: claim failed")
		return
	}
	if !resp.Succeeded {
		return // another node was first, or the record is gone
	}
	n.stats.claims.Add(1)
	n.mu.Lock()
	n.mine[name] = resp.Header.Revision
	n.mu.Unlock()
	n.log.Info().Str("sandbox", name).Int64("token", resp.Header.Revision).Msg("cluster: sandbox claimed")
	n.emit(Event{Kind: Own, Sandbox: name})
}

// liveOn returns the live nodes of host (n.mu held).
func (n *Node) liveOn(host string) []string {
	var out []string
	for name, info := range n.nodes {
		if info.Host == host {
			out = append(out, name)
		}
	}
	return out
}

// place is rendezvous hashing: the node with the highest hash of (sandbox,
// node) wins; "" when there is no node.
func place(sandbox string, nodes []string) string {
	best, bestScore := "", uint64(0)
	for _, node := range nodes {
		h := fnv.New64a()
		_, _ = h.Write([]byte(sandbox))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(node))
		if s := mix(h.Sum64()); best == "" || s > bestScore || (s == bestScore && node < best) {
			best, bestScore = node, s
		}
	}
	return best
}

// mix spreads FNV's output (splitmix64's finalizer).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Self is this node.
func (n *Node) Self() NodeInfo { return n.cfg.Self }

// Nodes returns the live nodes, by name.
func (n *Node) Nodes() []NodeInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]NodeInfo, 0, len(n.nodes))
	for _, info := range n.nodes {
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Place returns the node a new sandbox should be created on: rendezvous
// hashing over every live node.
func (n *Node) Place(sandbox string) NodeInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.nodes))
	for name := range n.nodes {
		names = append(names, name)
	}
	if w := place(sandbox, names); w != "" {
		return n.nodes[w]
	}
	return n.cfg.Self
}

// Whereabouts is what the view says about a sandbox not driven here.
type Whereabouts struct {
	// Record is the sandbox's record (Exists false: there is none).
	Record store.Record
	Exists bool
	// Owner is its owner node, if it has one and the node is live.
	Owner    NodeInfo
	HasOwner bool
	// HostAlive: some node of the record's host is live.
	HostAlive bool
}

// Locate returns what the view knows of sandbox name.
func (n *Node) Locate(name string) Whereabouts {
	n.mu.Lock()
	defer n.mu.Unlock()
	var w Whereabouts
	w.Record, w.Exists = n.recs[name]
	if o, ok := n.owners[name]; ok {
		w.Owner, w.HasOwner = n.nodes[o.node]
		if !w.HasOwner {
			w.Owner = NodeInfo{Node: o.node}
		}
	}
	if w.Exists {
		w.HostAlive = len(n.liveOn(w.Record.Host)) > 0
	}
	return w
}

// Sandboxes returns every record in the view and, for each, its owner
// node's name ("" for none) and whether a node of its host is live.
func (n *Node) Sandboxes() []Whereabouts {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Whereabouts, 0, len(n.recs))
	for name, rec := range n.recs {
		w := Whereabouts{Record: rec, Exists: true, HostAlive: len(n.liveOn(rec.Host)) > 0}
		if o, ok := n.owners[name]; ok {
			w.Owner, w.HasOwner = n.nodes[o.node]
			if !w.HasOwner {
				w.Owner = NodeInfo{Node: o.node}
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Record.Spec.Name < out[j].Record.Spec.Name })
	return out
}

// Owns reports whether this node owns sandbox name now (and its lease is
// valid): the check before acting.
func (n *Node) Owns(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.mine[name]
	return ok && time.Now().Before(n.validUntil)
}

// Owned returns the sandboxes this node owns, sorted.
func (n *Node) Owned() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.mine))
	for name := range n.mine {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Refused counts this node's record writes refused by the fencing check
// (at etcd, or locally because its lease was not renewed).
func (n *Node) Refused() int64 { return n.stats.FencedWrites() }

// Stats are the node's counters.
func (n *Node) Stats() *Stats { return n.stats }

// Client is the node's etcd client.
func (n *Node) Client() *clientv3.Client { return n.cli }

// Prefix is the cluster's key prefix.
func (n *Node) Prefix() string { return n.prefix }

// Close leaves the cluster: it stops the loops and revokes the lease, so
// this node's key and owner keys go at once and other nodes claim its
// sandboxes without waiting for the TTL (their supervisors keep running).
func (n *Node) Close() error {
	n.cancel()
	<-n.done
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := n.cli.Revoke(ctx, n.leaseID()); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		n.log.Warn().Err(err).Msg("cluster: revoke lease on leave")
	}
	return n.records.Close()
}
