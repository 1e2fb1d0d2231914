package transport

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/trust"
)

// established is what an Admission knows of the connections past their
// handshake: how many each identity holds (its cap) and every one of
// them, with the certificate and verifier its handshake passed, for the
// sweep.
type established struct {
	mu     sync.Mutex
	count  map[trust.Identity]int // capped connections by identity
	conns  map[*liveConn]struct{}
	quit   chan struct{} // closed to stop the sweep; nil while none runs
	done   chan struct{} // closed when the sweep has stopped
	closed bool          // stop was called: no sweep starts again
}

func (e *established) init() {
	e.count = map[trust.Identity]int{}
	e.conns = map[*liveConn]struct{}{}
}

// liveConn is an established connection as its listener uses it: closing
// it (or its socket closing under it) releases its place.
type liveConn struct {
	net.Conn
	raw     net.Conn // the socket under Conn
	id      trust.Identity
	leaf    *x509.Certificate
	v       *trust.Verifier
	counted bool // counts in established.count[id]
	a       *Admission
	once    sync.Once
}

// Close closes the connection and releases its place.
func (c *liveConn) Close() error {
	err := c.Conn.Close()
	c.a.forget(c)
	return err
}

// CloseWrite half-closes the connection when the one it wraps can (TLS,
// TCP): a relay's splice ends one direction with it.
func (c *liveConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return fmt.Errorf("transport: %T cannot half-close: %w", c.Conn, errors.ErrUnsupported)
}

// errIdentityConns: establish closed a connection over its identity's
// cap (counted and logged there).
var errIdentityConns = errors.New("transport: the identity holds its cap of established connections")

// Track registers conn, whose handshake just ended, as an open
// connection of id (leaf is its certificate, which v accepted), as an
// endpoint registers its own, without counting it against id's cap: the
// returned connection is to be used in conn's place (closing it releases
// its place), and the sweep closes it once v says leaf is revoked. The relay listener tracks both ends of a relay
// (each exists because the gateway handed out its token).
func (a *Admission) Track(conn net.Conn, id trust.Identity, leaf *x509.Certificate, v *trust.Verifier) net.Conn {
	c, _ := a.establish(conn, id, leaf, v, false) // uncapped: never refused
	return c
}

// establish registers conn, whose handshake just ended, as an open
// connection of id (leaf is its certificate, which v accepted). When
// capped (an endpoint's connection whose socket is not a privileged
// source's), it counts against id's cap (Limits.ClientConns, ...): when
// id already holds that many, conn is closed, the refusal counted and
// logged (ReasonIdentityConns), and an error returned. Otherwise the
// returned connection is to be used in conn's place: closing it releases
// its place, and the sweep closes it once v's revocation check says leaf
// is revoked.
//
// Only a completed handshake counts: a peer must hold id's key to take
// one of id's places, and no other identity's count changes.
func (a *Admission) establish(conn net.Conn, id trust.Identity, leaf *x509.Certificate, v *trust.Verifier, capped bool) (net.Conn, error) {
	c := &liveConn{Conn: conn, raw: rawConn(conn), id: id, leaf: leaf, v: v, counted: capped, a: a}
	e := &a.est
	e.mu.Lock()
	if capped {
		if limit := a.identityCap(id.Role); e.count[id] >= limit {
			e.mu.Unlock()
			addr := conn.RemoteAddr().String()
			_ = c.raw.Close() // no close_notify: nothing is written to a peer over its cap
			a.refuse(ReasonIdentityConns, "", id.String(), addr, "", "",
				fmt.Errorf("%s holds %d established connections (the cap for its role): close some, or use another identity", id, limit))
			return nil, errIdentityConns
		}
		e.count[id]++
	}
	e.conns[c] = struct{}{}
	if e.quit == nil && !e.closed {
		e.quit, e.done = make(chan struct{}), make(chan struct{})
		go a.sweep(e.quit, e.done)
	}
	e.mu.Unlock()
	return c, nil
}

// identityCap is the cap of established connections of an identity of
// role r.
func (a *Admission) identityCap(r trust.Role) int {
	switch r {
	case trust.RoleClient:
		return a.limits.ClientConns
	case trust.RoleGateway:
		return a.limits.GatewayConns
	default:
		return a.limits.SupervisorConns
	}
}

// forget releases c's place (once).
func (a *Admission) forget(c *liveConn) {
	c.once.Do(func() {
		e := &a.est
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.conns, c)
		if c.counted {
			if e.count[c.id]--; e.count[c.id] <= 0 {
				delete(e.count, c.id)
			}
		}
	})
}

// Conns returns how many established connections id holds against its
// cap.
func (a *Admission) Conns(id trust.Identity) int {
	a.est.mu.Lock()
	defer a.est.mu.Unlock()
	return a.est.count[id]
}

// sweep checks every established connection every Limits.SweepEvery until
// quit is closed: one whose socket is closed (a listener that closed the
// socket under the connection it was handed) gives its place back, and
// one whose certificate its verifier now says is revoked is closed,
// counted and logged (ReasonRevoked). A gateway's verifier asks its view
// of the client records, which in a cluster follows etcd, so a
// revocation made through any node closes the client's connections on
// every node.
func (a *Admission) sweep(quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(a.limits.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		a.est.mu.Lock()
		conns := make([]*liveConn, 0, len(a.est.conns))
		for c := range a.est.conns {
			conns = append(conns, c)
		}
		a.est.mu.Unlock()
		for _, c := range conns {
			if fdOf(c.raw) < 0 {
				a.forget(c)
				continue
			}
			reason, err := stillAccepted(c.v, c.leaf)
			if err == nil {
				continue
			}
			// The socket, not the TLS connection: closing that writes a
			// close_notify, which a peer that stopped reading would
			// hold for seconds. Its reader fails and its listener closes
			// the rest.
			_ = c.raw.Close()
			a.forget(c)
			a.refuse(reason, "", c.id.String(), c.raw.RemoteAddr().String(), "", "", err)
		}
	}
}

// stillAccepted asks v's revocation check again about leaf, which v
// accepted at the handshake (a nil v, or one without a check, accepts).
// The chain and the identity do not change. Expiry is not checked: a
// gateway node's certificate is issued when it starts and not renewed
// while it runs, so closing the connections of one that outlives it would
// cut a node that still works; a new connection is refused then.
func stillAccepted(v *trust.Verifier, leaf *x509.Certificate) (reason string, err error) {
	if v == nil || v.Revoked == nil || leaf == nil {
		return "", nil
	}
	if v.Revoked(leaf.SerialNumber) {
		return ReasonRevoked, fmt.Errorf("certificate serial %s (%s) was revoked while connected: connection closed", leaf.SerialNumber.Text(16), leaf.Subject.CommonName)
	}
	return "", nil
}

// stop stops the sweep and keeps a new one from starting.
func (e *established) stop() {
	e.mu.Lock()
	e.closed = true
	quit, done := e.quit, e.done
	e.quit = nil
	e.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}
