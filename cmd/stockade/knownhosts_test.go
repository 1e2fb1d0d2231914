package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stockade-dev/stockade/client"
)

func hostKeyText(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(ssh.MarshalAuthorizedKey(k))
}

// TestKnownHostsLine: the gateway's host_key is wire input: one
// authorized_keys line or nothing is written; ssh reads the result back
// under the alias.
func TestKnownHostsLine(t *testing.T) {
	key := hostKeyText(t)
	line, err := knownHostsLine("box.0123456789ab.stockade", key)
	if err != nil {
		t.Fatal(err)
	}
	_, hosts, _, _, _, err := ssh.ParseKnownHosts(line)
	if err != nil || len(hosts) != 1 || hosts[0] != "box.0123456789ab.stockade" {
		t.Fatalf("known_hosts line %q: hosts %q, %v", line, hosts, err)
	}
	for _, bad := range []string{"", "not a key", key + "* " + key, key + "\n@cert-authority * " + key} {
		if line, err := knownHostsLine("box", bad); err == nil {
			t.Errorf("host_key %q became %q", bad, line)
		}
	}
}

// TestHostKeyAlias: one alias per sandbox name and CA; two gateways'
// sandboxes of one name differ.
func TestHostKeyAlias(t *testing.T) {
	a := &client.Config{CA: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}
	b := &client.Config{CA: "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"}
	a2 := &client.Config{CA: a.CA}
	if hostKeyAlias("box", a) != hostKeyAlias("box", a2) || hostKeyAlias("box", a) == hostKeyAlias("box", b) || hostKeyAlias("box", a) == hostKeyAlias("other", a) {
		t.Fatalf("aliases %s %s %s %s", hostKeyAlias("box", a), hostKeyAlias("box", a2), hostKeyAlias("box", b), hostKeyAlias("other", a))
	}
	if got := hostKeyAlias("box", a); !strings.HasPrefix(got, "box.") || !strings.HasSuffix(got, ".stockade") {
		t.Fatalf("alias %s", got)
	}
	if err := checkSandboxName("../../etc"); err == nil {
		t.Fatal("a path became a sandbox name")
	}
}

// TestPinHostKey: the file is replaced whole, 0600, in a directory of this
// user's; a directory others can write is refused and nothing written.
func TestPinHostKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "known_hosts.d")
	path := filepath.Join(dir, "box.x.stockade")
	for _, content := range []string{"box.x.stockade first\n", "box.x.stockade second\n"} {
		if err := pinHostKey(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if err != nil || string(b) != content || fi.Mode().Perm() != 0o600 {
			t.Fatalf("pinned file %q (%v, %v), want %q mode 0600", b, fi.Mode(), err, content)
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := pinHostKey(filepath.Join(open, "box"), []byte("x\n")); err == nil || !strings.Contains(err.Error(), "no one else can write") {
		t.Errorf("a world-writable directory: %v", err)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("written into a world-writable directory: %v", ents)
	}
}

// TestWriteNewKnownHosts: connect's file is made once, never over another.
func TestWriteNewKnownHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := writeNewKnownHosts(path, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if err := writeNewKnownHosts(path, []byte("b\n")); err == nil {
		t.Fatal("an existing file was overwritten")
	}
	if b, _ := os.ReadFile(path); string(b) != "a\n" {
		t.Fatalf("file holds %q", b)
	}
}
