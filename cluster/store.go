package cluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/store/etcdstore"
)

// Store is the sandbox records as this node's sandbox actors see them:
// reads from etcd, and writes fenced by ownership. It implements the
// sandbox actor's Store seam.
type Store struct{ n *Node }

// Store returns the node's fenced record store.
func (n *Node) Store() *Store { return &Store{n: n} }

// Get returns a record, or an error wrapping store.ErrNotFound.
func (s *Store) Get(ctx context.Context, name string) (store.Record, error) {
	return s.n.records.Get(ctx, name)
}

// List returns every record.
func (s *Store) List(ctx context.Context) ([]store.Record, error) { return s.n.records.List(ctx) }

// Put writes rec if this node owns its sandbox and the stored revision is
// rec.Revision. A create (revision 0) claims the sandbox in the same
// transaction: the record and the owner key are created together, or
// neither. A write this node may not make (not the owner, or its lease not
// renewed in time) fails with store.ErrNotOwner and is counted.
func (s *Store) Put(ctx context.Context, rec store.Record) (uint64, error) {
	n, name := s.n, rec.Spec.Name
	if err := n.cfg.Faults.Inject(store.PointWrite); err != nil {
		return 0, fmt.Errorf("cluster: write sandbox %q: %w", name, err)
	}
	rev, err := s.put(ctx, rec)
	if err == nil {
		if ferr := n.cfg.Faults.Inject(store.PointCommitted); ferr != nil {
			return 0, fmt.Errorf("cluster: write sandbox %q: %w", name, ferr)
		}
	}
	return rev, err
}

func (s *Store) put(ctx context.Context, rec store.Record) (uint64, error) {
	n, name := s.n, rec.Spec.Name
	if rec.Host == "" {
		rec.Host = n.cfg.Self.Host
	}
	if err := rec.Validate(""); err != nil {
		return 0, fmt.Errorf("cluster: write sandbox %q: %w", name, err)
	}
	data, err := etcdstore.Encode(rec)
	if err != nil {
		return 0, err
	}
	recKey, ownKey := n.records.Key(name), n.key("owners", name)
	if rec.Revision == 0 {
		if !n.Valid() {
			return 0, s.refuse("create", name, "its lease is not renewed")
		}
		lease := n.leaseID()
		resp, err := n.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(recKey), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(ownKey), "=", 0),
		).Then(clientv3.OpPut(recKey, string(data)), clientv3.OpPut(ownKey, n.cfg.Self.Node, clientv3.WithLease(lease))).Commit()
		if err != nil {
			return 0, fmt.Errorf("cluster: create sandbox %q: %w", name, err)
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("cluster: create sandbox %q: %w (a sandbox of that name exists)", name, store.ErrConflict)
		}
		n.mu.Lock()
		n.mine[name] = resp.Header.Revision
		n.mu.Unlock()
		return uint64(resp.Header.Revision), nil
	}
	tok, err := s.token("write", name)
	if err != nil {
		return 0, err
	}
	resp, err := n.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(recKey), "=", int64(rec.Revision)),
		clientv3.Compare(clientv3.CreateRevision(ownKey), "=", tok),
	).Then(clientv3.OpPut(recKey, string(data))).
		Else(clientv3.OpGet(recKey, clientv3.WithKeysOnly()), clientv3.OpGet(ownKey, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return 0, fmt.Errorf("cluster: write sandbox %q: %w", name, err)
	}
	if !resp.Succeeded {
		return 0, s.failed("write", name, tok, rec.Revision, resp)
	}
	return uint64(resp.Header.Revision), nil
}

// Delete removes a record, and its owner key with it, if this node owns
// it and its revision is rev.
func (s *Store) Delete(ctx context.Context, name string, rev uint64) error {
	n := s.n
	if err := n.cfg.Faults.Inject(store.PointWrite); err != nil {
		return fmt.Errorf("cluster: delete sandbox %q: %w", name, err)
	}
	tok, err := s.token("delete", name)
	if err != nil {
		return err
	}
	recKey, ownKey := n.records.Key(name), n.key("owners", name)
	resp, err := n.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(recKey), "=", int64(rev)),
		clientv3.Compare(clientv3.CreateRevision(ownKey), "=", tok),
	).Then(clientv3.OpDelete(recKey), clientv3.OpDelete(ownKey)).
		Else(clientv3.OpGet(recKey, clientv3.WithKeysOnly()), clientv3.OpGet(ownKey, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return fmt.Errorf("cluster: delete sandbox %q: %w", name, err)
	}
	if !resp.Succeeded {
		return s.failed("delete", name, tok, rev, resp)
	}
	n.mu.Lock()
	delete(n.mine, name)
	n.mu.Unlock()
	return nil
}

// token is this node's fencing token for name, if it owns it and its lease
// is valid.
func (s *Store) token(op, name string) (int64, error) {
	n := s.n
	n.mu.Lock()
	tok, ok := n.mine[name]
	valid := n.validUntilOK()
	n.mu.Unlock()
	switch {
	case !ok:
		return 0, s.refuse(op, name, "another node owns it, or nobody does")
	case !valid:
		return 0, s.refuse(op, name, "its lease is not renewed")
	}
	return tok, nil
}

// failed explains a fenced transaction that did not succeed: a changed
// owner key is a fencing refusal, a changed record a plain conflict.
func (s *Store) failed(op, name string, tok int64, rev uint64, resp *clientv3.TxnResponse) error {
	var recRev, ownRev int64
	if len(resp.Responses) == 2 {
		if r := resp.Responses[0].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			recRev = r.Kvs[0].ModRevision
		}
		if r := resp.Responses[1].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			ownRev = r.Kvs[0].CreateRevision
		}
	}
	if ownRev != tok {
		s.n.mu.Lock()
		if s.n.mine[name] == tok {
			delete(s.n.mine, name)
		}
		s.n.mu.Unlock()
		return s.refuse(op, name, fmt.Sprintf("etcd refused the write: its owner key changed (token %d, now %d)", tok, ownRev))
	}
	if op == "delete" && recRev == 0 {
		return nil
	}
	return fmt.Errorf("cluster: %s sandbox %q: %w (stored revision %d, read %d)", op, name, store.ErrConflict, recRev, rev)
}

func (s *Store) refuse(op, name, why string) error {
	s.n.stats.fencedWrites.Add(1)
	return fmt.Errorf("cluster: %s sandbox %q refused on node %s: %s: %w", op, name, s.n.cfg.Self.Node, why, store.ErrNotOwner)
}

// validUntilOK (n.mu held).
func (n *Node) validUntilOK() bool { return time.Now().Before(n.validUntil) }
