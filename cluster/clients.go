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
// node's view (the watch) holds the revoked serials its TLS verifier asks.

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
	return nil
}

// RevokeClient marks every unrevoked certificate issued to name as revoked
// at at, each with a write conditioned on the certificate's revision, and
// returns the serials revoked now.
func (n *Node) RevokeClient(ctx context.Context, name string, at time.Time) ([]string, error) {
	resp, err := n.cli.Get(ctx, n.prefix+"clients/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: revoke client %q: %w", name, err)
	}
	var revoked []string
	for _, kv := range resp.Kvs {
		var c store.ClientCert
		if json.Unmarshal(kv.Value, &c) != nil || c.Name != name || !c.Revoked.IsZero() {
			continue
		}
		c.Revoked = at
		data, err := json.Marshal(c)
		if err != nil {
			return revoked, fmt.Errorf("cluster: revoke client %q: %w", name, err)
		}
		t, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpPut(string(kv.Key), string(data))).Commit()
		if err != nil {
			return revoked, fmt.Errorf("cluster: revoke client %q: %w", name, err)
		}
		if t.Succeeded {
			revoked = append(revoked, c.Serial)
			n.mu.Lock()
			n.revoked[c.Serial] = true
			n.mu.Unlock()
		}
	}
	return revoked, nil
}

// Revoked reports whether a client certificate's serial is revoked
// anywhere in the cluster (as of this node's view).
func (n *Node) Revoked(serial *big.Int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.revoked[serial.Text(16)]
}

// applyClient records a client certificate's revocation (n.mu held).
func (n *Node) applyClient(value []byte) {
	var c store.ClientCert
	if json.Unmarshal(value, &c) == nil && !c.Revoked.IsZero() && c.Serial != "" {
		n.revoked[c.Serial] = true
	}
}
