package trust

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// EtcdDir is the directory, beside a cluster's CA (`stockade cluster init
// DIR`), that holds the TLS material of the cluster's etcd. Its CA is
// etcd's own, not the cluster's: etcd must accept the gateway nodes'
// client certificate only, never a stockade identity (a client or
// supervisor certificate), since whoever writes etcd's keys rewrites every
// sandbox.
const EtcdDir = "etcd"

// Files in EtcdDir.
const (
	// EtcdServerCert and EtcdServerKey are etcd's serving certificate (for
	// 127.0.0.1, ::1, localhost and the hosts given) and key.
	EtcdServerCert = "server.crt"
	EtcdServerKey  = "server.key"
	// EtcdClientCert and EtcdClientKey are the gateway nodes' client
	// certificate for etcd (`gateway run --etcd-cert/--etcd-key`).
	EtcdClientCert = "client.crt"
	EtcdClientKey  = "client.key"
)

// EtcdPKI is the TLS material of a cluster's etcd, as files.
type EtcdPKI struct {
	Dir string
	// Created lists the files this call made (the others were kept).
	Created []string
	// NotAfter is when the CA expires.
	NotAfter time.Time
}

// Path returns the path of one of EtcdPKI's files (CACertFile, CAKeyFile,
// EtcdServerCert, ...).
func (p EtcdPKI) Path(file string) string { return filepath.Join(p.Dir, file) }

// LoadOrCreateEtcdPKI makes, in dir (mode 0700), what etcd and the gateway
// nodes need for mutual TLS: a CA of its own (CACertFile, CAKeyFile), etcd's
// serving certificate for 127.0.0.1, ::1, localhost and hosts (IP addresses
// or DNS names), and one client certificate the nodes share. Keys are 0600.
// Files that exist are kept (a certificate with its key), so a second run
// changes nothing; a certificate without its key is an error naming both.
func LoadOrCreateEtcdPKI(dir string, hosts []string) (EtcdPKI, error) {
	p := EtcdPKI{Dir: dir}
	ca, created, err := LoadOrCreateCA(dir)
	if err != nil {
		return p, fmt.Errorf("etcd CA: %w", err)
	}
	if created {
		p.Created = append(p.Created, p.Path(CACertFile), p.Path(CAKeyFile))
	}
	p.NotAfter = ca.Cert.NotAfter
	san := append([]string{"127.0.0.1", "::1", "localhost"}, hosts...)
	leaves := []struct {
		cert, key, cn string
		usage         x509.ExtKeyUsage
		hosts         []string
	}{
		{EtcdServerCert, EtcdServerKey, "stockade etcd", x509.ExtKeyUsageServerAuth, san},
		{EtcdClientCert, EtcdClientKey, "stockade gateway node", x509.ExtKeyUsageClientAuth, nil},
	}
	for _, l := range leaves {
		certPath, keyPath := p.Path(l.cert), p.Path(l.key)
		certOK, err := exists(certPath)
		if err != nil {
			return p, err
		}
		keyOK, err := exists(keyPath)
		if err != nil {
			return p, err
		}
		if certOK && keyOK {
			continue
		}
		if certOK || keyOK {
			return p, fmt.Errorf("etcd TLS incomplete: one of %s and %s is missing; remove the other to make both again", certPath, keyPath)
		}
		certPEM, keyPEM, err := ca.issueTLS(l.cn, l.usage, l.hosts)
		if err != nil {
			return p, err
		}
		if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
			return p, err
		}
		if err := WriteFileAtomic(certPath, certPEM, 0o644); err != nil {
			return p, err
		}
		p.Created = append(p.Created, certPath, keyPath)
	}
	return p, nil
}

// issueTLS makes a key and a plain TLS certificate for it (no stockade
// identity: a name, IP and DNS names, one extended key usage), valid until
// the CA expires.
func (ca *CA) issueTLS(cn string, usage x509.ExtKeyUsage, hosts []string) (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-clockSkew),
		NotAfter:              ca.Cert.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{usage},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.signer)
	if err != nil {
		return nil, nil, fmt.Errorf("issue %s: %w", cn, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}
