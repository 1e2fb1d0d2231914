package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	// IssuerSerials are the serials of the issuer's live certificates when
	// this one was issued (an admin client's; the request does not say
	// which one it came with): revoking one of them revokes this one
	// (RevokeClosure). Empty for the gateway's own and for records
	// written before this was recorded.
	IssuerSerials []string `json:"issuerSerials,omitempty"`
	// Issued is when it was issued (zero: before this was recorded).
	Issued time.Time `json:"issued,omitzero"`
}

// Live reports whether c is neither revoked nor expired at now.
func (c ClientCert) Live(now time.Time) bool { return c.Revoked.IsZero() && now.Before(c.NotAfter) }

// RevokeClosure returns the serials that revoking the certificates seed
// picks revokes: those, every certificate one of them issued, every
// certificate one of those issued, and so on (certs: every recorded
// certificate, revoked ones included: a certificate revoked earlier still
// passes its revocation on to what it issued). Issuance is followed by
// certificate (IssuedByCert), never by name alone, and never to a
// certificate the gateway issued itself (IssuedBy "gateway:NODE": the
// local admin's), which only a revoke naming it takes.
func RevokeClosure(certs []ClientCert, seed func(ClientCert) bool) map[string]bool {
	set := map[string]bool{}
	byName := map[string][]ClientCert{}
	for _, c := range certs {
		if seed(c) {
			set[c.Serial] = true
		}
		byName[c.Name] = append(byName[c.Name], c)
	}
	for grew := true; grew; {
		grew = false
		for _, c := range certs {
			issuer, ok := strings.CutPrefix(c.IssuedBy, "client:")
			if !ok || set[c.Serial] {
				continue
			}
			for _, x := range byName[issuer] {
				if set[x.Serial] && c.IssuedByCert(x) {
					set[c.Serial], grew = true, true
					break
				}
			}
		}
	}
	return set
}

// IssuedByCert reports whether x, a certificate of the client c names as
// its issuer, may be the one that asked for c: one of c.IssuerSerials (the
// issuer's live certificates when c was issued; the request does not say
// which of them the issuer used), or, for a record written before those
// were recorded, a certificate live when c was issued (both issue times
// recorded), or else any certificate of that name.
func (c ClientCert) IssuedByCert(x ClientCert) bool {
	if len(c.IssuerSerials) > 0 {
		return slices.Contains(c.IssuerSerials, x.Serial)
	}
	if c.Issued.IsZero() || x.Issued.IsZero() {
		return true
	}
	at := c.Issued
	return !at.Before(x.Issued) && at.Before(x.NotAfter) && (x.Revoked.IsZero() || at.Before(x.Revoked))
}

// PutClientCert records an issued client certificate; certificates expired
// for a day are dropped on the way (they fail verification anyway), unless
// revoked: a revoked record says its name was revoked (a name is not
// issued again without IssueRequest's reuse_name) and passes its
// revocation on to what it issued (RevokeClosure).
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
			if json.Unmarshal(v, &cc) == nil && cc.NotAfter.Before(expired) && cc.Revoked.IsZero() {
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

// RevokeClient marks every certificate of name, and what they issued
// (RevokeClosure), as revoked at at, in one transaction, and returns the
// certificates revoked now (none: no such client, or all revoked).
func (s *Store) RevokeClient(ctx context.Context, name string, at time.Time) ([]ClientCert, error) {
	return s.revoke(ctx, "client "+name, func(c ClientCert) bool { return c.Name == name }, at)
}

// RevokeCert is RevokeClient for the one certificate of serial (hex) and
// what it issued.
func (s *Store) RevokeCert(ctx context.Context, serial string, at time.Time) ([]ClientCert, error) {
	return s.revoke(ctx, "certificate "+serial, func(c ClientCert) bool { return c.Serial == serial }, at)
}

// revoke revokes the certificates seed picks and their closure (what names
// them in errors).
func (s *Store) revoke(ctx context.Context, what string, seed func(ClientCert) bool, at time.Time) ([]ClientCert, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store %s: revoke %s: %w", s.path, what, err)
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
		serials := RevokeClosure(all, seed)
		for i, cc := range all {
			if !serials[cc.Serial] || !cc.Revoked.IsZero() {
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
		return nil, fmt.Errorf("store %s: revoke %s: %w", s.path, what, err)
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
