package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockade-dev/stockade/store"
)

// The certificates the cluster issued to clients live under clients/SERIAL,
// so that a revocation made through one node is refused by every node: each
// node's view (the watch) holds the revoked serials its TLS verifier asks,
// and the records (role, grants, issuer) its handlers ask.

// ClientCerts returns every client certificate the cluster issued.
func (n *Node) ClientCerts() ([]store.ClientCert, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := n.cli.Get(ctx, n.prefix+"clients/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: list clients: %w", err)
	}
	out := make([]store.ClientCert, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var c store.ClientCert
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("cluster: decode client certificate %s: %w", kv.Key, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// PutClientCert records an issued client certificate.
func (n *Node) PutClientCert(ctx context.Context, c store.ClientCert) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("cluster: encode client %q: %w", c.Name, err)
	}
	if _, err := n.cli.Put(ctx, n.key("clients", c.Serial), string(data)); err != nil {
		return fmt.Errorf("cluster: record client %q: %w", c.Name, err)
	}
	n.clients.Put(c)
	return nil
}

// RevokeClient revokes the certificates of name and what they issued
// (store.RevokeClosure), each with a write conditioned on the
// certificate's revision, and returns those revoked now. It reads again
// until a pass finds nothing more to revoke: a client issued by one of
// them through another node while this ran is revoked too (and such an
// issue, which checks its issuer after its write, sees the revocation:
// see the gateway's issue).
func (n *Node) RevokeClient(ctx context.Context, name string, at time.Time) ([]store.ClientCert, error) {
	return n.revoke(ctx, "client "+name, func(c store.ClientCert) bool { return c.Name == name }, at)
}

// RevokeCert is RevokeClient for the one certificate of serial (hex) and
// what it issued.
func (n *Node) RevokeCert(ctx context.Context, serial string, at time.Time) ([]store.ClientCert, error) {
	return n.revoke(ctx, "certificate "+serial, func(c store.ClientCert) bool { return c.Serial == serial }, at)
}

// revoke revokes the certificates seed picks and their closure (what names
// them in errors).
func (n *Node) revoke(ctx context.Context, what string, seed func(store.ClientCert) bool, at time.Time) ([]store.ClientCert, error) {
	var revoked []store.ClientCert
	for {
		resp, err := n.cli.Get(ctx, n.prefix+"clients/", clientv3.WithPrefix())
		if err != nil {
			return revoked, fmt.Errorf("cluster: revoke %s: %w", what, err)
		}
		certs := make([]store.ClientCert, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			_ = json.Unmarshal(kv.Value, &certs[i]) // an unreadable record names no client
		}
		serials := store.RevokeClosure(certs, seed)
		more := false
		for i, kv := range resp.Kvs {
			c := certs[i]
			if c.Serial == "" || !serials[c.Serial] || !c.Revoked.IsZero() {
				continue
			}
			c.Revoked = at
			data, err := json.Marshal(c)
			if err != nil {
				return revoked, fmt.Errorf("cluster: revoke %s: %w", what, err)
			}
			t, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpPut(string(kv.Key), string(data))).Commit()
			if err != nil {
				return revoked, fmt.Errorf("cluster: revoke %s: %w", what, err)
			}
			more = true // done now, or changed since the read: read again
			if t.Succeeded {
				revoked = append(revoked, c)
				n.mu.Lock()
				n.revoked[c.Serial] = true
				n.mu.Unlock()
				n.clients.Put(c)
			}
		}
		if !more {
			return revoked, nil
		}
	}
}

// Clients is this node's view of the client records (kept by the watch,
// and by this node's own writes at once).
func (n *Node) Clients() *store.ClientIndex { return n.clients }

// Revoked reports whether a client certificate's serial is revoked
// anywhere in the cluster (as of this node's view).
func (n *Node) Revoked(serial *big.Int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.revoked[serial.Text(16)]
}

// applyClient records a client certificate: its revocation, and what the
// client may do (n.mu held).
func (n *Node) applyClient(value []byte) {
	var c store.ClientCert
	if json.Unmarshal(value, &c) != nil || c.Serial == "" {
		return
	}
	if !c.Revoked.IsZero() {
		n.revoked[c.Serial] = true
	}
	n.clients.Put(c)
}
