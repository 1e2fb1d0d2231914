package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The etcd TLS flags and the endpoints' schemes must agree; plain http
// needs --etcd-insecure; a key readable by others and a missing half of a
// pair are refused with the fix.
func TestEtcdTLSFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	if err := os.WriteFile(key, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files etcdTLSFiles
		eps   []string
		want  string // "" : no error
		tls   bool
	}{
		{"plain", etcdTLSFiles{}, []string{"http://a:2379"}, "add --etcd-insecure to accept the risk", false},
		{"plain, insecure by name", etcdTLSFiles{insecure: true}, []string{"http://a:2379"}, "", false},
		{"https system roots", etcdTLSFiles{}, []string{"https://a:2379"}, "", true},
		{"mixed", etcdTLSFiles{}, []string{"http://a:2379", "https://b:2379"}, "mixed http:// and https://", false},
		{"files on http", etcdTLSFiles{ca: "x"}, []string{"http://a:2379"}, "need https://", false},
		{"half a pair", etcdTLSFiles{cert: "c"}, []string{"https://a:2379"}, "go together", false},
		{"open key", etcdTLSFiles{cert: "c", key: key}, []string{"https://a:2379"}, "chmod 600", false},
		{"missing ca", etcdTLSFiles{ca: filepath.Join(dir, "none")}, []string{"https://a:2379"}, "--etcd-cacert", false},
	} {
		tc2, err := tc.files.config(tc.eps)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		case tc.want == "" && (tc2 != nil) != tc.tls:
			t.Errorf("%s: TLS config %v, want TLS %v", tc.name, tc2, tc.tls)
		}
	}
}
