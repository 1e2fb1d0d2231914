package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ClientCert is one certificate the gateway issued to a client: what
// `client revoke NAME` needs to refuse every certificate of that name.
type ClientCert struct {
	Name string `json:"name"`
	// Serial is the certificate's serial number in hex.
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	// Revoked is when it was revoked (zero: it is not).
	Revoked time.Time `json:"revoked,omitzero"`
}

// PutClientCert records an issued client certificate; certificates expired
// for a day are dropped on the way (they fail verification anyway).
func (s *Store) PutClientCert(ctx context.Context, c ClientCert) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store %s: record client %q: %w", s.path, c.Name, err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store %s: encode client %q: %w", s.path, c.Name, err)
	}
	expired := time.Now().Add(-24 * time.Hour)
	err = s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(clientsBucket())
		var old [][]byte
		_ = b.ForEach(func(k, v []byte) error {
			var cc ClientCert
			if json.Unmarshal(v, &cc) == nil && cc.NotAfter.Before(expired) {
				old = append(old, append([]byte(nil), k...))
			}
			return nil
		})
		for _, k := range old {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return b.Put([]byte(c.Serial), data)
	}, false)
	if err != nil {
		return fmt.Errorf("store %s: record client %q: %w", s.path, c.Name, err)
	}
	return nil
}

// RevokeClient marks every certificate issued to name as revoked at at and
// returns the serials revoked now (none: no such client, or all revoked).
func (s *Store) RevokeClient(ctx context.Context, name string, at time.Time) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store %s: revoke client %q: %w", s.path, name, err)
	}
	var revoked []string
	err := s.update(func(tx *bolt.Tx) error {
		revoked = nil
		b := tx.Bucket(clientsBucket())
		var put [][2][]byte
		err := b.ForEach(func(k, v []byte) error {
			var cc ClientCert
			if err := json.Unmarshal(v, &cc); err != nil {
				return fmt.Errorf("decode client certificate %s: %w", k, err)
			}
			if cc.Name != name || !cc.Revoked.IsZero() {
				return nil
			}
			cc.Revoked = at
			data, err := json.Marshal(cc)
			if err != nil {
				return err
			}
			put = append(put, [2][]byte{append([]byte(nil), k...), data})
			revoked = append(revoked, cc.Serial)
			return nil
		})
		if err != nil {
			return err
		}
		for _, kv := range put {
			if err := b.Put(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	}, false)
	if err != nil {
		return nil, fmt.Errorf("store %s: revoke client %q: %w", s.path, name, err)
	}
	return revoked, nil
}

// ClientCerts returns every recorded client certificate.
func (s *Store) ClientCerts() ([]ClientCert, error) {
	var out []ClientCert
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(clientsBucket()).ForEach(func(k, v []byte) error {
			var cc ClientCert
			if err := json.Unmarshal(v, &cc); err != nil {
				return fmt.Errorf("decode client certificate %s: %w", k, err)
			}
			out = append(out, cc)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store %s: list clients: %w", s.path, err)
	}
	return out, nil
}
