package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// etcdTLSFiles are the --etcd-cacert, --etcd-cert and --etcd-key files,
// and --etcd-insecure.
type etcdTLSFiles struct {
	ca, cert, key string
	insecure      bool
}

// config returns the TLS of the cluster's etcd connections: nil for plain
// http endpoints with no files, only with --etcd-insecure; an error naming
// the fix when the files and the endpoints' schemes disagree, a file is
// unusable or plain http is not asked for by name. Whoever can write etcd's
// keys rewrites every sandbox record, and the nodes act on them as root.
func (f etcdTLSFiles) config(endpoints []string) (*tls.Config, error) {
	https := 0
	for _, e := range endpoints {
		if strings.HasPrefix(e, "https://") {
			https++
		}
	}
	files := f.ca != "" || f.cert != "" || f.key != ""
	switch {
	case https > 0 && https < len(endpoints):
		return nil, errors.New("--etcd: mixed http:// and https:// endpoints: use one scheme for every etcd endpoint")
	case https == 0 && files:
		return nil, errors.New("--etcd-cacert/--etcd-cert/--etcd-key need https:// etcd endpoints (the given ones are plain http)")
	case https == 0 && !f.insecure:
		return nil, errors.New("--etcd with http:// endpoints: anyone who reaches etcd could then rewrite every sandbox record, and the nodes act on them; " +
			"use https:// with --etcd-cacert, --etcd-cert and --etcd-key (stockade cluster init DIR makes them, for an etcd run with --client-cert-auth), " +
			"or add --etcd-insecure to accept the risk (an etcd only you can reach, a test)")
	case https == 0:
		return nil, nil
	case (f.cert == "") != (f.key == ""):
		return nil, errors.New("--etcd-cert and --etcd-key go together")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-cacert %s: no PEM certificate in it", f.ca)
		}
		tc.RootCAs = pool
	}
	if f.cert != "" {
		if st, err := os.Stat(f.key); err == nil && st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("--etcd-key %s is readable by group or others (mode %04o): chmod 600 it", f.key, st.Mode().Perm())
		}
		kp, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}
