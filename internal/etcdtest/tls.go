package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are a test etcd's TLS material: a CA, the server's certificate
// (127.0.0.1) and a client certificate etcd accepts; OtherCA signs a
// client certificate etcd must refuse.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// OtherCert and OtherKey are a client certificate from another CA.
	OtherCert, OtherKey string
}

// Client is a TLS configuration with the accepted client certificate.
func (f *TLSFiles) Client(t testing.TB) *tls.Config {
	t.Helper()
	return f.config(t, f.ClientCert, f.ClientKey)
}

// Other is a TLS configuration with the foreign client certificate.
func (f *TLSFiles) Other(t testing.TB) *tls.Config {
	t.Helper()
	return f.config(t, f.OtherCert, f.OtherKey)
}

func (f *TLSFiles) config(t testing.TB, cert, key string) *tls.Config {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
}

// StartTLS starts etcd serving https on 127.0.0.1 and requiring client
// certificates from its CA.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	dir := t.TempDir()
	files := &TLSFiles{}
	ca, caKey := makeCert(t, dir, "ca", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid, c.KeyUsage = true, true, x509.KeyUsageCertSign
	})
	files.CA = filepath.Join(dir, "ca.crt")
	files.ServerCert, files.ServerKey = paths(dir, "server")
	makeCert(t, dir, "server", ca, caKey, func(c *x509.Certificate) {
		c.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	})
	files.ClientCert, files.ClientKey = paths(dir, "client")
	makeCert(t, dir, "client", ca, caKey, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} })
	other, otherKey := makeCert(t, dir, "other-ca", nil, nil, func(c *x509.Certificate) {
		c.IsCA, c.BasicConstraintsValid, c.KeyUsage = true, true, x509.KeyUsageCertSign
	})
	files.OtherCert, files.OtherKey = paths(dir, "other")
	makeCert(t, dir, "other", other, otherKey, func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} })
	return start(t, files)
}

func paths(dir, name string) (string, string) {
	return filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
}

// makeCert writes NAME.crt and NAME.key in dir: self-signed when parent
// is nil, else signed by parent.
func makeCert(t testing.TB, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, edit func(*x509.Certificate)) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	edit(tmpl)
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	crt, kf := paths(dir, name)
	if err := os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// StartWithTLS starts etcd serving https on 127.0.0.1 with files (made
// elsewhere, e.g. by `stockade cluster init`), requiring client
// certificates from files.CA.
func StartWithTLS(t testing.TB, files *TLSFiles) *Server {
	t.Helper()
	return start(t, files)
}
