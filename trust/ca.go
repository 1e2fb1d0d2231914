package trust

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Files under a PKI directory (the gateway uses <state-dir>/pki).
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

const (
	// caValidity is the lifetime of a newly created CA.
	caValidity = 10 * 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so that peers with slightly slow clocks
	// accept a fresh certificate.
	clockSkew = 5 * time.Minute
)

// CA is the gateway's certificate authority.
type CA struct {
	Cert    *x509.Certificate // the self-signed CA certificate
	CertPEM []byte            // Cert, PEM-encoded

	signer crypto.Signer
}

// LoadOrCreateCA loads dir/ca.crt and dir/ca.key, or creates them on first
// use: dir with mode 0700, the key (mode 0600) and certificate (mode 0644)
// each written atomically. The CA is a self-signed ECDSA P-256 certificate
// valid for 10 years that may sign only leaf certificates. The key file must
// pass [CheckKeyFile]. created reports whether the CA was made by this call.
// Finding only one of the two files is an error: a new CA would invalidate
// every certificate issued so far, so that is left to the operator.
func LoadOrCreateCA(dir string) (ca *CA, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create PKI dir: %w", err)
	}
	certPath := filepath.Join(dir, CACertFile)
	keyPath := filepath.Join(dir, CAKeyFile)
	certOK, err := exists(certPath)
	if err != nil {
		return nil, false, err
	}
	keyOK, err := exists(keyPath)
	if err != nil {
		return nil, false, err
	}
	switch {
	case certOK && keyOK:
		ca, err := loadCA(certPath, keyPath)
		return ca, false, err
	case certOK || keyOK:
		have, missing := certPath, keyPath
		if keyOK {
			have, missing = keyPath, certPath
		}
		return nil, false, fmt.Errorf("CA incomplete: %s exists but %s does not; restore it, or remove both to create a new CA (which invalidates every issued certificate)",
			have, missing)
	}
	ca, err = createCA(certPath, keyPath)
	if err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// exists reports whether path exists.
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", path, err)
}

// loadCA reads and cross-checks an existing CA certificate and key.
func loadCA(certPath, keyPath string) (*CA, error) {
	if err := CheckKeyFile(keyPath); err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA certificate %s is not a CA certificate", certPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	signer, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	if !publicKeysEqual(signer.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s does not match certificate %s", keyPath, certPath)
	}
	return &CA{Cert: cert, CertPEM: certPEM, signer: signer}, nil
}

// createCA makes a new CA and writes it: the key first, then the certificate.
func createCA(certPath, keyPath string) (*CA, error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tag := make([]byte, 4)
	if _, err := rand.Read(tag); err != nil {
		return nil, fmt.Errorf("random CA name: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "stockade CA " + hex.EncodeToString(tag)},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new CA certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("write CA key: %w", err)
	}
	if err := WriteFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: certPEM, signer: key}, nil
}

// Issue signs a leaf certificate for id over pub, valid from five minutes ago
// for validity (capped at the CA's own expiry). The certificate carries id as
// its URI SAN and CommonName, and may be used both to serve and to dial.
func (ca *CA) Issue(id Identity, pub crypto.PublicKey, validity time.Duration) (certPEM []byte, cert *x509.Certificate, err error) {
	if err := id.Validate(); err != nil {
		return nil, nil, fmt.Errorf("issue: %w", err)
	}
	if validity <= 0 {
		return nil, nil, fmt.Errorf("issue %s: validity %v is not positive", id, validity)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id.String()},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{id.uri()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.signer)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: %w", id, err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: parse: %w", id, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

// IssueKeyPair makes a new key with [NewKey] and issues a certificate for it.
func (ca *CA) IssueKeyPair(id Identity, validity time.Duration) (certPEM, keyPEM []byte, cert *x509.Certificate, err error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, cert, err = ca.Issue(id, key.Public(), validity)
	if err != nil {
		return nil, nil, nil, err
	}
	return certPEM, keyPEM, cert, nil
}

// NewKey makes an ECDSA P-256 key and returns it with its PKCS#8 PEM encoding.
func NewKey() (key crypto.Signer, keyPEM []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Pool returns a certificate pool holding the PEM-encoded CA certificates in
// caPEM. It fails when none of them parse.
func Pool(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	var lastErr error
	for rest := caPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			lastErr = err
			continue
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		if lastErr != nil {
			return nil, fmt.Errorf("no usable CA certificate: %w", lastErr)
		}
		return nil, errors.New("no CA certificate in PEM data")
	}
	return pool, nil
}

// newSerial returns a random, positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("random serial: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// parseCertPEM parses the first CERTIFICATE block of data.
func parseCertPEM(data []byte) (*x509.Certificate, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no CERTIFICATE PEM block")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// parseKeyPEM parses a PKCS#8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY")
// private key.
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PRIVATE KEY PEM block")
		}
		switch block.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("unsupported private key type %T", k)
			}
			return s, nil
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		}
	}
}

// publicKeysEqual reports whether a and b are the same public key.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	ka, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ka.Equal(b)
}
