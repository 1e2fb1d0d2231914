package trust

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, created, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatalf("LoadOrCreateCA: %v", err)
	}
	if !created {
		t.Fatal("created = false for a new dir")
	}
	return ca
}

func verifierFor(t *testing.T, ca *CA) *Verifier {
	t.Helper()
	pool, err := Pool(ca.CertPEM)
	if err != nil {
		t.Fatalf("Pool: %v", err)
	}
	return &Verifier{CAs: pool}
}

func issue(t *testing.T, ca *CA, id Identity) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, cert, err := ca.IssueKeyPair(id, time.Hour)
	if err != nil {
		t.Fatalf("IssueKeyPair(%s): %v", id, err)
	}
	kp, err := KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("KeyPair: %v", err)
	}
	if kp.Leaf == nil || !kp.Leaf.Equal(cert) {
		t.Fatal("KeyPair: Leaf not set to the issued certificate")
	}
	return kp
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "pki")
	ca, created, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !created {
		t.Error("created = false on first use")
	}
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %04o, want 0700", m)
	}
	if m := mode(t, filepath.Join(dir, CAKeyFile)); m != 0o600 {
		t.Errorf("key mode %04o, want 0600", m)
	}
	if m := mode(t, filepath.Join(dir, CACertFile)); m != 0o644 {
		t.Errorf("cert mode %04o, want 0644", m)
	}
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA=%v MaxPathLen=%d zero=%v", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("CA key usage %v", c.KeyUsage)
	}
	if !strings.HasPrefix(c.Subject.CommonName, "stockade CA ") {
		t.Errorf("CA CN %q", c.Subject.CommonName)
	}
	if c.NotAfter.Before(time.Now().Add(9 * 365 * 24 * time.Hour)) {
		t.Errorf("CA NotAfter %v: want about 10 years", c.NotAfter)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
		t.Errorf("CA serial %v", c.SerialNumber)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("PKI dir holds %d entries, want 2 (no temp files left)", len(entries))
	}

	again, created, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if created {
		t.Error("created = true on second use")
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Error("loaded CA certificate differs from the created one")
	}
	// The loaded key signs certificates that the original verifies.
	_, _, leaf, err := again.IssueKeyPair(Identity{RoleGateway, "node1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifierFor(t, ca).Verify([]*x509.Certificate{leaf}); err != nil {
		t.Errorf("leaf from reloaded CA: %v", err)
	}

	// Only one of the two files: refuse rather than make a new CA.
	if err := os.Remove(filepath.Join(dir, CACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(dir); err == nil || !strings.Contains(err.Error(), CACertFile) {
		t.Errorf("missing cert: err = %v", err)
	}
}

func TestCAKeyModeRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, _, err := LoadOrCreateCA(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, CAKeyFile)
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreateCA(dir)
	if err == nil {
		t.Fatal("LoadOrCreateCA accepted a 0644 key")
	}
	for _, want := range []string{key, "chmod 600", "0644"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(dir); err != nil {
		t.Errorf("after chmod 600: %v", err)
	}
}

func TestCAKeyOwnerRefused(t *testing.T) {
	testenv.NeedRoot(t) // to chown the key to another uid
	dir := filepath.Join(t.TempDir(), "pki")
	if _, _, err := LoadOrCreateCA(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, CAKeyFile)
	if err := os.Chown(key, 65534, -1); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreateCA(dir)
	if err == nil {
		t.Fatal("LoadOrCreateCA accepted a key owned by uid 65534")
	}
	for _, want := range []string{key, "owned by uid 65534", "chown 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestCheckKeyFileMissing(t *testing.T) {
	err := CheckKeyFile(filepath.Join(t.TempDir(), "nope.key"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, data := range []string{"one", "two"} {
		if err := WriteFileAtomic(path, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
		if m := mode(t, path); m != 0o640 {
			t.Errorf("mode %04o, want 0640", m)
		}
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	ca := newCA(t)
	for _, id := range []Identity{{RoleGateway, "node-1"}, {RoleSupervisor, "sb-42"}, {RoleClient, "alice"}} {
		_, _, cert, err := ca.IssueKeyPair(id, time.Hour)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		got, err := IdentityOf(cert)
		if err != nil || got != id {
			t.Errorf("IdentityOf = %v, %v; want %v", got, err, id)
		}
		if cert.Subject.CommonName != id.String() {
			t.Errorf("CN %q, want %q", cert.Subject.CommonName, id.String())
		}
		if len(cert.URIs) != 1 || cert.URIs[0].String() != "stockade://"+string(id.Role)+"/"+id.Name {
			t.Errorf("URIs %v", cert.URIs)
		}
		eku := cert.ExtKeyUsage
		if len(eku) != 2 || eku[0] != x509.ExtKeyUsageServerAuth || eku[1] != x509.ExtKeyUsageClientAuth {
			t.Errorf("ExtKeyUsage %v", eku)
		}
	}
	if s := (Identity{RoleClient, "alice"}).String(); s != "client:alice" {
		t.Errorf("String = %q", s)
	}
	for _, bad := range []Identity{{"admin", "x"}, {RoleClient, ""}, {RoleClient, "a/b"}} {
		if _, _, _, err := ca.IssueKeyPair(bad, time.Hour); err == nil {
			t.Errorf("issued a certificate for invalid identity %q", bad)
		}
	}
}

// certWithURIs signs a leaf with arbitrary URI SANs, bypassing Issue's checks.
func certWithURIs(t *testing.T, ca *CA, uris ...string) *x509.Certificate {
	t.Helper()
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "odd"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestIdentityOfRejects(t *testing.T) {
	ca := newCA(t)
	v := verifierFor(t, ca)
	for name, uris := range map[string][]string{
		"none":         nil,
		"other scheme": {"spiffe://example/x"},
		"unknown role": {"stockade://admin/x"},
		"empty name":   {"stockade://client/"},
		"two":          {"stockade://client/a", "stockade://client/b"},
	} {
		cert := certWithURIs(t, ca, uris...)
		if id, err := IdentityOf(cert); err == nil {
			t.Errorf("%s: IdentityOf = %v, want error", name, id)
		}
		_, err := v.Verify([]*x509.Certificate{cert})
		var pe *PeerError
		if !errors.As(err, &pe) || pe.Reason != ReasonBadIdentity {
			t.Errorf("%s: Verify err = %v, want %s", name, err, ReasonBadIdentity)
		}
	}
}

func TestVerifyExpired(t *testing.T) {
	ca := newCA(t)
	_, _, cert, err := ca.IssueKeyPair(Identity{RoleClient, "bob"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v := verifierFor(t, ca)
	v.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	_, err = v.Verify([]*x509.Certificate{cert})
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Reason != ReasonExpired {
		t.Fatalf("err = %v, want %s", err, ReasonExpired)
	}
	if !strings.HasPrefix(err.Error(), "tls peer refused (expired): ") {
		t.Errorf("message %q", err)
	}
	// A verifier without CAs trusts nothing, not the system roots.
	if _, err := (&Verifier{}).Verify([]*x509.Certificate{cert}); !errors.As(err, &pe) || pe.Reason != ReasonUnknownAuthority {
		t.Errorf("no CAs: err = %v", err)
	}
}

func TestPool(t *testing.T) {
	if _, err := Pool([]byte("not pem")); err == nil {
		t.Error("Pool accepted garbage")
	}
	a, b := newCA(t), newCA(t)
	pool, err := Pool(append(append([]byte{}, a.CertPEM...), b.CertPEM...))
	if err != nil {
		t.Fatal(err)
	}
	_, _, leaf, err := b.IssueKeyPair(Identity{RoleClient, "c"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&Verifier{CAs: pool}).Verify([]*x509.Certificate{leaf}); err != nil {
		t.Errorf("second CA in pool not trusted: %v", err)
	}
}

// handshake runs a TLS handshake over loopback TCP and returns each side's
// error. The client reads once after its handshake so that it sees the
// server's verdict (an alert, or EOF when the server closes).
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(10 * time.Second)
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		c.SetDeadline(deadline)
		s := tls.Server(c, server)
		err = s.Handshake()
		if err == nil && s.ConnectionState().NegotiatedProtocol != "h2" {
			err = errors.New("server: ALPN h2 not negotiated")
		}
		s.Close()
		done <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(deadline)
	cl := tls.Client(c, client)
	clientErr = cl.Handshake()
	if clientErr == nil {
		if _, err := cl.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
			clientErr = err
		}
	}
	cl.Close()
	return <-done, clientErr
}

func wantRefused(t *testing.T, err error, reason string) {
	t.Helper()
	var pe *PeerError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *PeerError %s", err, reason)
	}
	if pe.Reason != reason {
		t.Fatalf("reason %q (%v), want %q", pe.Reason, err, reason)
	}
}

func TestHandshake(t *testing.T) {
	ca := newCA(t)
	other := newCA(t)
	gw := issue(t, ca, Identity{RoleGateway, "node1"})
	alice := issue(t, ca, Identity{RoleClient, "alice"})
	mallory := issue(t, other, Identity{RoleClient, "alice"})

	t.Run("ok", func(t *testing.T) {
		var got Identity
		sv := verifierFor(t, ca)
		sv.Accept = func(id Identity) error { got = id; return nil }
		serr, cerr := handshake(t, ServerConfig(gw, sv), ClientConfig(alice, verifierFor(t, ca)))
		if serr != nil || cerr != nil {
			t.Fatalf("server %v, client %v", serr, cerr)
		}
		if got != (Identity{RoleClient, "alice"}) {
			t.Errorf("server saw %v", got)
		}
	})
	t.Run("unknown_authority", func(t *testing.T) {
		serr, cerr := handshake(t, ServerConfig(gw, verifierFor(t, ca)), ClientConfig(mallory, verifierFor(t, ca)))
		wantRefused(t, serr, ReasonUnknownAuthority)
		if cerr == nil {
			t.Error("client saw no failure")
		}
	})
	t.Run("client refuses server of another CA", func(t *testing.T) {
		fake := issue(t, other, Identity{RoleGateway, "node1"})
		serr, cerr := handshake(t, ServerConfig(fake, verifierFor(t, other)), ClientConfig(alice, verifierFor(t, ca)))
		wantRefused(t, cerr, ReasonUnknownAuthority)
		if serr == nil {
			t.Error("server saw no failure")
		}
	})
	t.Run("no_certificate", func(t *testing.T) {
		serr, _ := handshake(t, ServerConfig(gw, verifierFor(t, ca)), ClientConfig(tls.Certificate{}, verifierFor(t, ca)))
		wantRefused(t, serr, ReasonNoCertificate)
	})
	t.Run("revoked", func(t *testing.T) {
		sv := verifierFor(t, ca)
		sv.Revoked = func(s *big.Int) bool { return s.Cmp(alice.Leaf.SerialNumber) == 0 }
		serr, cerr := handshake(t, ServerConfig(gw, sv), ClientConfig(alice, verifierFor(t, ca)))
		wantRefused(t, serr, ReasonRevoked)
		if cerr == nil {
			t.Error("client saw no failure")
		}
		// Another client of the same CA still gets in.
		bob := issue(t, ca, Identity{RoleClient, "bob"})
		if serr, cerr := handshake(t, ServerConfig(gw, sv), ClientConfig(bob, verifierFor(t, ca))); serr != nil || cerr != nil {
			t.Errorf("bob: server %v, client %v", serr, cerr)
		}
	})
	t.Run("not_allowed", func(t *testing.T) {
		sv := verifierFor(t, ca)
		sv.Accept = func(id Identity) error {
			if id.Role != RoleGateway {
				return errors.New("only gateways may connect")
			}
			return nil
		}
		serr, _ := handshake(t, ServerConfig(gw, sv), ClientConfig(alice, verifierFor(t, ca)))
		wantRefused(t, serr, ReasonNotAllowed)
		if !strings.Contains(serr.Error(), "client:alice") {
			t.Errorf("error %q does not name the identity", serr)
		}
	})
	t.Run("tls1.2 client", func(t *testing.T) {
		cfg := ClientConfig(alice, verifierFor(t, ca))
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		serr, cerr := handshake(t, ServerConfig(gw, verifierFor(t, ca)), cfg)
		if serr == nil || cerr == nil {
			t.Fatalf("TLS 1.2 handshake: server %v, client %v; want both to fail", serr, cerr)
		}
	})
}
