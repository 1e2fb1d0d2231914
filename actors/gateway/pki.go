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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/access"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// PKIDir is the CA's directory inside the state dir (0700).
const PKIDir = "pki"

// LocalClient is the name of the client certificate `gateway run` writes
// into its state dir's client.config for the local operator: an admin.
const LocalClient = access.LocalAdmin

// Validity of the certificates the gateway issues.
const (
	nodeValidity       = 90 * 24 * time.Hour  // issued at every start
	supervisorValidity = 365 * 24 * time.Hour // issued at every supervisor start
	clientValidity     = 365 * 24 * time.Hour
	renewBefore        = 30 * 24 * time.Hour // the local client config is renewed this long before it expires
)

// pki is the gateway's trust: its CA, its node certificate and the records
// of the client certificates it issued (role, grants, issuer, revoked),
// asked at every handshake (revoked?) and every client request (access).
type pki struct {
	ca   *trust.CA
	node tls.Certificate
	// self is this node: the issuer of the local admin's certificate.
	self trust.Identity
	st   certStore
	// clients is the view of the client records: this gateway's own on a
	// single node (it is their only writer), the cluster node's (kept by
	// its watch) in a cluster.
	clients *store.ClientIndex
	// elsewhere, if set, also reports serials revoked through other
	// nodes (cluster).
	elsewhere func(*big.Int) bool
	// reread: the view may lag its store (a cluster node's watch), so a
	// client it does not know is looked up in the store once more, at
	// most every rereadEvery (lastReread, under rereadMu).
	reread     bool
	rereadMu   sync.Mutex
	lastReread time.Time
}

// rereadEvery bounds how often a cluster node reads every client record
// from etcd because a caller was not in its view (a client issued through
// another node a moment ago).
const rereadEvery = 500 * time.Millisecond

// certStore keeps the certificates issued to clients: bbolt on a single
// node, etcd in a cluster.
type certStore interface {
	ClientCerts() ([]store.ClientCert, error)
	PutClientCert(ctx context.Context, c store.ClientCert) error
	// RevokeClient revokes a client's certificates and what they issued
	// (transitively, store.RevokeClosure); RevokeCert one certificate and
	// what it issued.
	RevokeClient(ctx context.Context, name string, at time.Time) ([]store.ClientCert, error)
	RevokeCert(ctx context.Context, serial string, at time.Time) ([]store.ClientCert, error)
}

// openPKI loads the CA of stateDir (creating it on a single node's first
// start; a cluster node needs the cluster's CA there), issues this node's
// certificate and loads the client records: into a new view on a single
// node, or clusterView, the cluster node's (nil on a single node).
func openPKI(stateDir, node string, st certStore, clusterView *store.ClientIndex) (*pki, error) {
	dir := filepath.Join(stateDir, PKIDir)
	if clusterView != nil {
		if _, err := os.Stat(filepath.Join(dir, trust.CAKeyFile)); err != nil {
			return nil, fmt.Errorf("no cluster CA in %s (%w): every node of a cluster needs the same CA; make one with `stockade cluster init DIR` and copy DIR to each node's <state-dir>/%s (mode 0700, key 0600)", dir, err, PKIDir)
		}
	}
	ca, _, err := trust.LoadOrCreateCA(dir)
	if err != nil {
		return nil, err
	}
	self := trust.Identity{Role: trust.RoleGateway, Name: node}
	certPEM, keyPEM, _, err := ca.IssueKeyPair(self, nodeValidity)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	kp, err := trust.KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	p := &pki{ca: ca, node: kp, self: self, st: st, clients: clusterView, reread: clusterView != nil}
	if p.clients == nil {
		certs, err := st.ClientCerts()
		if err != nil {
			return nil, err
		}
		p.clients = store.NewClientIndex(certs)
	}
	return p, nil
}

// verifier accepts peers of the given roles whose certificates are from
// this CA and not revoked.
func (p *pki) verifier(roles ...trust.Role) *trust.Verifier {
	pool := x509.NewCertPool()
	pool.AddCert(p.ca.Cert)
	revoked := func(s *big.Int) bool { return p.clients.Revoked(s.Text(16)) }
	if p.elsewhere != nil {
		revoked = func(s *big.Int) bool { return p.clients.Revoked(s.Text(16)) || p.elsewhere(s) }
	}
	return &trust.Verifier{CAs: pool, Accept: trust.AcceptRoles(roles...), Revoked: revoked}
}

// Access is what client name may do: from the records of its live
// certificates (access.Resolve). It is the sandbox actors' Clients. In a
// cluster, a name with no live record in this node's view is looked up
// in etcd once more (the watch may not have brought a record written
// through another node a moment ago).
func (p *pki) Access(name string) (access.Grant, error) {
	g, err := p.resolve(name)
	if err == nil || !p.reread || !p.mayReread() {
		return g, err
	}
	certs, rerr := p.st.ClientCerts()
	if rerr != nil {
		return g, fmt.Errorf("%w (and the cluster's records could not be read: %v)", err, rerr)
	}
	for _, c := range certs {
		p.clients.Put(c)
	}
	return p.resolve(name)
}

// mayReread reports whether a reread is due (and takes it).
func (p *pki) mayReread() bool {
	p.rereadMu.Lock()
	defer p.rereadMu.Unlock()
	if time.Since(p.lastReread) < rereadEvery {
		return false
	}
	p.lastReread = time.Now()
	return true
}

// resolve is Access from the view alone.
func (p *pki) resolve(name string) (access.Grant, error) {
	live := p.clients.Live(name, time.Now())
	issued := make([]access.Issued, len(live))
	for i, c := range live {
		issued[i] = access.Issued{Role: c.Role, Sandboxes: c.Sandboxes}
	}
	return access.Resolve(name, issued)
}

// GrantedTo names the clients whose live certificates grant sandbox (an
// operator's --sandbox), sorted: a create of that name by another
// non-admin client is refused (the sandboxes actor).
func (p *pki) GrantedTo(sandbox string) []string {
	now := time.Now()
	var names []string
	for _, c := range p.clients.All() {
		if c.Live(now) && c.Role == string(access.Operator) && slices.Contains(c.Sandboxes, sandbox) {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// issue is one certificate to issue: for whom, what it may do, who asks.
type issue struct {
	name      string
	role      access.Role
	sandboxes []string
	by        trust.Identity
	validity  time.Duration
	// reuse lets a name whose certificates were all revoked be issued
	// again (the new client then drives the sandboxes the name created).
	reuse bool
}

// issueClient certifies a client's public key and records it (role,
// grants, issuer and the issuer's certificates: for access and revoke). A
// client name that has live certificates keeps its role and sandboxes: a
// new certificate for it must have the same (a renewal), or the name be
// revoked first. A name with no live certificate but a revoked one is not
// issued again unless in.reuse (or by the gateway itself: the local
// admin's): sandboxes are owned by name ("client:NAME"), so a new holder
// of a revoked name would drive what the old one created.
//
// An issue by a client that is revoked meanwhile (through another node)
// does not outlive it: after its record is written, the issuer's
// certificates are read again, and if none is live the new one is revoked
// too. With RevokeClient's reading again until nothing more is revoked,
// one of the two sees the other's write.
func (p *pki) issueClient(ctx context.Context, in issue, pub any) ([]byte, *x509.Certificate, error) {
	if in.validity <= 0 {
		in.validity = clientValidity
	}
	g, err := p.Access(in.name)
	switch {
	case err == nil && !access.SameGrant(g, in.role, in.sandboxes):
		return nil, nil, errdefs.Refused("client %s exists as %s%s: a new certificate for it keeps its role and sandboxes (give the same to renew it), or revoke it first (stockade client revoke %s) or pick another name",
			in.name, g.Role, grantText(g), in.name)
	case err != nil && !in.reuse && in.by.Role != trust.RoleGateway:
		if at, ok := p.revokedAt(in.name); ok {
			return nil, nil, errdefs.Refused("client %s was revoked (%s): the sandboxes it created are still owned by client:%s and its grants name it, so a new certificate of that name would drive them; pick another name, or give --reuse-name to hand them to the new client on purpose",
				in.name, at.UTC().Format(time.RFC3339), in.name)
		}
	}
	var issuerSerials []string
	if in.by.Role == trust.RoleClient {
		for _, c := range p.clients.Live(in.by.Name, time.Now()) {
			issuerSerials = append(issuerSerials, c.Serial)
		}
	}
	certPEM, cert, err := p.ca.Issue(trust.Identity{Role: trust.RoleClient, Name: in.name}, pub, in.validity)
	if err != nil {
		return nil, nil, err
	}
	rec := store.ClientCert{Name: in.name, Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter,
		Role: string(in.role), Sandboxes: in.sandboxes, IssuedBy: in.by.String(), IssuerSerials: issuerSerials, Issued: time.Now()}
	if err := p.st.PutClientCert(ctx, rec); err != nil {
		return nil, nil, err
	}
	p.clients.Put(rec)
	if in.by.Role == trust.RoleClient {
		if err := p.issuerStillLive(ctx, in, rec.Serial); err != nil {
			return nil, nil, err
		}
	}
	return certPEM, cert, nil
}

// revokedAt reports whether name has a revoked certificate recorded, and
// when the last was revoked.
func (p *pki) revokedAt(name string) (time.Time, bool) {
	var last time.Time
	for _, c := range p.clients.All() {
		if c.Name == name && c.Revoked.After(last) {
			last = c.Revoked
		}
	}
	return last, !last.IsZero()
}

// issuerStillLive checks, in the store, that the client who asked for in
// has a live certificate; if not, the new certificate (serial) is revoked,
// with what it may have issued already, and the issue refused. The name's
// other certificates stay (a renewal of a name by a revoked issuer takes
// nothing from the name's earlier holder).
func (p *pki) issuerStillLive(ctx context.Context, in issue, serial string) error {
	certs, err := p.st.ClientCerts()
	if err != nil {
		return fmt.Errorf("check the issuer %s: %w", in.by, err)
	}
	now := time.Now()
	for _, c := range certs {
		if c.Name == in.by.Name && c.Live(now) {
			return nil
		}
	}
	revoked, err := p.st.RevokeCert(ctx, serial, time.Now())
	for _, c := range revoked {
		p.clients.Put(c)
	}
	if err != nil {
		return fmt.Errorf("the issuer %s was revoked meanwhile, and revoking the new certificate %s of %s failed: %w", in.by, serial, in.name, err)
	}
	return errdefs.Refused("client %s: its issuer %s was revoked meanwhile: the new certificate is revoked too", in.name, in.by)
}

// grantText is " (sandboxes a, b)" for an operator granted some.
func grantText(g access.Grant) string {
	s := ""
	if len(g.Sandboxes) > 0 {
		s = " (sandboxes " + strings.Join(g.Sandboxes, ", ") + ")"
	}
	if g.Note != "" {
		s += " (" + g.Note + ")"
	}
	return s
}

// revoke revokes every certificate issued to name and what they issued
// (transitively, by certificate: store.RevokeClosure); the next handshake of any of them is refused,
// and so is every request of theirs from now on (access finds no live
// certificate), on a connection made before too.
func (p *pki) revoke(ctx context.Context, name string) ([]store.ClientCert, error) {
	revoked, err := p.st.RevokeClient(ctx, name, time.Now())
	if err != nil {
		return nil, err
	}
	for _, c := range revoked {
		p.clients.Put(c)
	}
	return revoked, nil
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
		certPEM, _, err := p.issueClient(ctx, issue{name: LocalClient, role: access.Admin, by: p.self, validity: clientValidity}, key.Public())
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
