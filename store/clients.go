package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ClientCert is one certificate the gateway issued to a client: what
// `client revoke NAME` needs to refuse every certificate of that name (and
// of the clients it issued), and what the client may do (package access).
type ClientCert struct {
	Name string `json:"name"`
	// Serial is the certificate's serial number in hex.
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	// Revoked is when it was revoked (zero: it is not).
	Revoked time.Time `json:"revoked,omitzero"`
	// Role is the role it was issued with (admin, operator, viewer);
	// empty for a certificate issued before roles (access.Resolve).
	Role string `json:"role,omitempty"`
	// Sandboxes are the sandboxes granted to an operator at issue.
	Sandboxes []string `json:"sandboxes,omitempty"`
	// IssuedBy is who asked for it: "client:NAME" (an admin client) or
	// "gateway:NODE" (the local admin's, which the gateway issues
	// itself); empty for a certificate issued before this was recorded.
	IssuedBy string `json:"issuedBy,omitempty"`
	// Issued is when it was issued (zero: before this was recorded).
	Issued time.Time `json:"issued,omitzero"`
}

// Live reports whether c is neither revoked nor expired at now.
func (c ClientCert) Live(now time.Time) bool { return c.Revoked.IsZero() && now.Before(c.NotAfter) }

// RevokeClosure returns the client names that `client revoke name`
// revokes: name, every client a certificate of name issued, every client
// one of those issued, and so on (certs: every recorded certificate,
// revoked ones included: a name revoked earlier still passes its
// revocation on to what it issued).
func RevokeClosure(certs []ClientCert, name string) map[string]bool {
	set := map[string]bool{name: true}
	for grew := true; grew; {
		grew = false
		for _, c := range certs {
			issuer, ok := strings.CutPrefix(c.IssuedBy, "client:")
			if ok && set[issuer] && !set[c.Name] {
				set[c.Name], grew = true, true
			}
		}
	}
	return set
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

// RevokeClient marks every certificate of the clients RevokeClosure names
// (name and what it issued, transitively) as revoked at at, in one
// transaction, and returns the certificates revoked now (none: no such
// client, or all revoked).
func (s *Store) RevokeClient(ctx context.Context, name string, at time.Time) ([]ClientCert, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store %s: revoke client %q: %w", s.path, name, err)
	}
	var revoked []ClientCert
	err := s.update(func(tx *bolt.Tx) error {
		revoked = nil
		b := tx.Bucket(clientsBucket())
		var all []ClientCert
		var keys [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var cc ClientCert
			if err := json.Unmarshal(v, &cc); err != nil {
				return fmt.Errorf("decode client certificate %s: %w", k, err)
			}
			all, keys = append(all, cc), append(keys, append([]byte(nil), k...))
			return nil
		})
		if err != nil {
			return err
		}
		names := RevokeClosure(all, name)
		for i, cc := range all {
			if !names[cc.Name] || !cc.Revoked.IsZero() {
				continue
			}
			cc.Revoked = at
			data, err := json.Marshal(cc)
			if err != nil {
				return err
			}
			if err := b.Put(keys[i], data); err != nil {
				return err
			}
			revoked = append(revoked, cc)
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
