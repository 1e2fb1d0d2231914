package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// PKIDir is the CA's directory inside the state dir (0700).
const PKIDir = "pki"

// LocalClient is the name of the client certificate `gateway run` writes
// into its state dir's client.config for the local operator.
const LocalClient = "admin"

// Validity of the certificates the gateway issues.
const (
	nodeValidity       = 90 * 24 * time.Hour  // issued at every start
	supervisorValidity = 365 * 24 * time.Hour // issued at every supervisor start
	clientValidity     = 365 * 24 * time.Hour
	renewBefore        = 30 * 24 * time.Hour // the local client config is renewed this long before it expires
)

// pki is the gateway's trust: its CA, its node certificate and the set of
// revoked client certificates, checked at every handshake.
type pki struct {
	ca      *trust.CA
	node    tls.Certificate
	revoked *revocations
	st      certStore
	// elsewhere, if set, also reports serials revoked through other
	// nodes (cluster).
	elsewhere func(*big.Int) bool
}

// certStore keeps the certificates issued to clients: bbolt on a single
// node, etcd in a cluster.
type certStore interface {
	ClientCerts() ([]store.ClientCert, error)
	PutClientCert(ctx context.Context, c store.ClientCert) error
	RevokeClient(ctx context.Context, name string, at time.Time) ([]string, error)
}

// openPKI loads the CA of stateDir (creating it on a single node's first
// start; a cluster node needs the cluster's CA there), issues this node's
// certificate and loads the revoked client certificates.
func openPKI(stateDir, node string, st certStore, cluster bool) (*pki, error) {
	dir := filepath.Join(stateDir, PKIDir)
	if cluster {
		if _, err := os.Stat(filepath.Join(dir, trust.CAKeyFile)); err != nil {
			return nil, fmt.Errorf("no cluster CA in %s (%w): every node of a cluster needs the same CA; make one with `stockade cluster init DIR` and copy DIR to each node's <state-dir>/%s (mode 0700, key 0600)", dir, err, PKIDir)
		}
	}
	ca, _, err := trust.LoadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, _, err := ca.IssueKeyPair(trust.Identity{Role: trust.RoleGateway, Name: node}, nodeValidity)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	p := &pki{ca: ca, node: kp, revoked: &revocations{m: map[string]bool{}}, st: st}
	certs, err := st.ClientCerts()
	if err != nil {
		return nil, err
	}
	for _, c := range certs {
		if !c.Revoked.IsZero() {
			p.revoked.add(c.Serial)
		}
	}
	return p, nil
}

// verifier accepts peers of the given roles whose certificates are from
// this CA and not revoked.
func (p *pki) verifier(roles ...trust.Role) *trust.Verifier {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	revoked := p.revoked.has
	if p.elsewhere != nil {
		revoked = func(s *big.Int) bool { return p.revoked.has(s) || p.elsewhere(s) }
	}
	return &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(roles...), Revoked: revoked}
}

// issueClient certifies a client's public key and records it (for revoke).
func (p *pki) issueClient(ctx context.Context, name string, pub any, validity time.Duration) ([]byte, *x509.Certificate, error) {
	if validity <= 0 {
		validity = clientValidity
	}
	certPEM, cert, err := p.ca.Issue(trust.Identity{Role: trust.RoleClient, Name: name}, pub, validity)
	if err != nil {
		return nil, nil, err
	}
	if err := p.st.PutClientCert(ctx, store.ClientCert{Name: name, Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter}); err != nil {
		return nil, nil, err
	}
	return certPEM, cert, nil
}

// revoke revokes every certificate issued to name; the next handshake of
// any of them is refused.
func (p *pki) revoke(ctx context.Context, name string) (int, error) {
	serials, err := p.st.RevokeClient(ctx, name, time.Now())
	if err != nil {
		return 0, err
	}
	for _, s := range serials {
		p.revoked.add(s)
	}
	return len(serials), nil
}

// writeLocalConfig writes <state-dir>/client.config for the local
// operator: the gateway's current address, the CA, and the admin client's
// certificate and key. A certificate still good for a month (from this CA,
// not revoked) is kept; otherwise a new one is issued.
func (p *pki) writeLocalConfig(ctx context.Context, stateDir string, addrs []string) error {
	path := contract.StateDir(stateDir).ClientConfig()
	cfg, err := trust.ReadClientConfig(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg = nil
	case err != nil:
		return fmt.Errorf("local client config: %w", err)
	}
	if cfg == nil || !p.stillGood(cfg) {
		key, keyPEM, err := trust.NewKey()
		if err != nil {
			return err
		}
		certPEM, _, err := p.issueClient(ctx, LocalClient, key.Public(), clientValidity)
		if err != nil {
			return fmt.Errorf("local client certificate: %w", err)
		}
		cfg = &trust.ClientFile{Name: LocalClient, Cert: string(certPEM), Key: string(keyPEM)}
	}
	cfg.CA, cfg.Gateways = string(p.ca.CertPEM), addrs
	return cfg.Write(path)
}

func (p *pki) stillGood(cfg *trust.ClientFile) bool {
	kp, err := trust.KeyPair([]byte(cfg.Cert), []byte(cfg.Key))
	if err != nil || kp.Leaf == nil {
		return false
	}
	_, err = p.verifier(trust.RoleClient).Verify([]*x509.Certificate{kp.Leaf})
	return err == nil && time.Until(kp.Leaf.NotAfter) > renewBefore
}

// revocations is the set of revoked certificate serials (hex).
type revocations struct {
	mu sync.RWMutex
	m  map[string]bool
}

func (r *revocations) add(serial string) {
	r.mu.Lock()
	r.m[serial] = true
	r.mu.Unlock()
}

func (r *revocations) has(serial *big.Int) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m[serial.Text(16)]
}
