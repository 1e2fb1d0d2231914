package store

import (
	"sort"
	"sync"
	"time"
)

// ClientIndex is a gateway's in-memory view of its client records: what
// the handlers ask at every request (the live certificates of a name) and
// the TLS verifier at every handshake (is this serial revoked), without a
// store read. Safe for concurrent use. A revocation is permanent here: a
// later record of the same serial without one (a stale or forged write)
// does not lift it.
type ClientIndex struct {
	mu       sync.RWMutex
	bySerial map[string]ClientCert
	byName   map[string]map[string]bool // name -> serials
}

// NewClientIndex returns an index holding certs.
func NewClientIndex(certs []ClientCert) *ClientIndex {
	x := &ClientIndex{bySerial: map[string]ClientCert{}, byName: map[string]map[string]bool{}}
	for _, c := range certs {
		x.Put(c)
	}
	return x
}

// Put adds or updates one record (one without a name or serial is
// ignored: it can match no certificate).
func (x *ClientIndex) Put(c ClientCert) {
	if c.Name == "" || c.Serial == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.bySerial[c.Serial]; ok {
		if c.Revoked.IsZero() {
			c.Revoked = old.Revoked
		}
		if old.Name != c.Name {
			delete(x.byName[old.Name], c.Serial)
			if len(x.byName[old.Name]) == 0 {
				delete(x.byName, old.Name)
			}
		}
	}
	x.bySerial[c.Serial] = c
	if x.byName[c.Name] == nil {
		x.byName[c.Name] = map[string]bool{}
	}
	x.byName[c.Name][c.Serial] = true
}

// Live returns the live certificates (ClientCert.Live) of name, by serial.
func (x *ClientIndex) Live(name string, now time.Time) []ClientCert {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []ClientCert
	for serial := range x.byName[name] {
		if c := x.bySerial[serial]; c.Live(now) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Serial < out[j].Serial })
	return out
}

// Revoked reports whether the certificate of serial (hex) is revoked.
func (x *ClientIndex) Revoked(serial string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return !x.bySerial[serial].Revoked.IsZero()
}

// All returns every record, by name, then issue time, then serial.
func (x *ClientIndex) All() []ClientCert {
	x.mu.RLock()
	out := make([]ClientCert, 0, len(x.bySerial))
	for _, c := range x.bySerial {
		out = append(out, c)
	}
	x.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Name != b.Name:
			return a.Name < b.Name
		case !a.Issued.Equal(b.Issued):
			return a.Issued.Before(b.Issued)
		}
		return a.Serial < b.Serial
	})
	return out
}
