package trust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Stable reasons of a [PeerError].
const (
	ReasonNoCertificate    = "no_certificate"    // the peer presented no certificate
	ReasonUnknownAuthority = "unknown_authority" // the chain does not verify against the CA
	ReasonExpired          = "expired"           // the certificate is outside its validity period
	ReasonRevoked          = "revoked"           // the certificate's serial is revoked
	ReasonBadIdentity      = "bad_identity"      // the certificate has no valid Identity
	ReasonNotAllowed       = "not_allowed"       // Verifier.Accept refused the identity
)

// PeerError is a refusal of a TLS peer by a [Verifier].
type PeerError struct {
	Reason string // one of the Reason* constants
	Err    error  // the underlying cause
}

// Error returns "tls peer refused (REASON): cause".
func (e *PeerError) Error() string {
	if e.Err == nil {
		return "tls peer refused (" + e.Reason + ")"
	}
	return "tls peer refused (" + e.Reason + "): " + e.Err.Error()
}

// Unwrap returns the underlying cause.
func (e *PeerError) Unwrap() error { return e.Err }

// Verifier is the peer verification shared by both sides of a TLS connection.
type Verifier struct {
	// CAs are the trusted CA certificates. nil trusts nothing (never the
	// system roots).
	CAs *x509.CertPool
	// Accept decides whether an authenticated peer identity may connect at
	// all (e.g. a supervisor endpoint accepts only RoleGateway). nil: any
	// identity.
	Accept func(Identity) error
	// Revoked reports whether a certificate (by serial) is revoked; nil:
	// none. It is checked at every handshake.
	Revoked func(serial *big.Int) bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Verify checks a peer's certificate chain, leaf first: the leaf must verify
// against CAs (with the rest of the chain as intermediates) at Now, not be
// revoked, carry a valid [Identity], and be accepted by Accept. It returns
// the peer's identity, or a [*PeerError].
func (v *Verifier) Verify(certs []*x509.Certificate) (Identity, error) {
	if len(certs) == 0 {
		return Identity{}, &PeerError{Reason: ReasonNoCertificate, Err: errors.New("no client certificate")}
	}
	if v == nil || v.CAs == nil {
		return Identity{}, &PeerError{Reason: ReasonUnknownAuthority, Err: errors.New("no trusted CA configured")}
	}
	leaf := certs[0]
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	opts := x509.VerifyOptions{
		Roots:         v.CAs,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(opts); err != nil {
		reason := ReasonUnknownAuthority
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			reason = ReasonExpired
		}
		return Identity{}, &PeerError{Reason: reason, Err: err}
	}
	if v.Revoked != nil && v.Revoked(leaf.SerialNumber) {
		return Identity{}, &PeerError{Reason: ReasonRevoked, Err: fmt.Errorf("certificate %s (%s) is revoked", serialHex(leaf), leaf.Subject.CommonName)}
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return Identity{}, &PeerError{Reason: ReasonBadIdentity, Err: err}
	}
	if v.Accept != nil {
		if err := v.Accept(id); err != nil {
			return Identity{}, &PeerError{Reason: ReasonNotAllowed, Err: fmt.Errorf("%s: %w", id, err)}
		}
	}
	return id, nil
}

// verifyConnection adapts v to tls.Config.VerifyConnection.
func (v *Verifier) verifyConnection(cs tls.ConnectionState) error {
	_, err := v.Verify(cs.PeerCertificates)
	return err
}

// ServerConfig returns a TLS 1.3-only server configuration presenting cert
// and verifying every client with v. A client certificate is requested but
// not required by crypto/tls, so that a missing one reaches v and is reported
// as no_certificate. Session tickets are disabled: every connection is fully
// verified, so a revocation takes effect at the next handshake.
func ServerConfig(cert tls.Certificate, v *Verifier) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
		ClientAuth:             tls.RequestClientCert,
		SessionTicketsDisabled: true,
		VerifyConnection:       v.verifyConnection,
		NextProtos:             []string{"h2"},
	}
}

// ClientConfig returns a TLS 1.3-only client configuration presenting cert
// (none if cert is the zero value) and verifying the server with v. Session
// resumption is disabled so that every connection is fully verified.
func ClientConfig(cert tls.Certificate, v *Verifier) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Host names are not used: endpoints listen on ephemeral ports and
		// a peer's identity is its stockade:// URI SAN, not a DNS name. So
		// crypto/tls's host name verification is off and VerifyConnection
		// does the whole verification (chain, revocation, identity, policy).
		InsecureSkipVerify:     true,
		VerifyConnection:       v.verifyConnection,
		SessionTicketsDisabled: true,
		ClientSessionCache:     nil,
		NextProtos:             []string{"h2"},
	}
	if len(cert.Certificate) > 0 {
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// KeyPair parses a PEM certificate (chain) and PEM private key into a
// tls.Certificate with Leaf set.
func KeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key pair: %w", err)
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("key pair: %w", err)
		}
		cert.Leaf = leaf
	}
	return cert, nil
}
