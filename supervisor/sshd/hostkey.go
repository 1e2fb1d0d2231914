package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// LoadOrCreateHostKey returns the host key stored at path (OpenSSH private
// key format). When there is none, it generates an ed25519 key and saves
// it with mode 0600 (directory 0700) so that the next server, e.g. after a
// supervisor restart, presents the same key. Two concurrent callers end up
// with the same key. A key file readable by group or others is refused,
// as OpenSSH does.
func LoadOrCreateHostKey(path string) (ssh.Signer, error) {
	if s, err := loadHostKey(path); !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sshd: generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "stockade sandbox host key")
	if err != nil {
		return nil, fmt.Errorf("sshd: marshal host key: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sshd: host key dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".hostkey-*")
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(pem.EncodeToMemory(block))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("sshd: write host key: %w", err)
	}
	// Link, unlike rename, never replaces a key another instance saved first.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sshd: save host key: %w", err)
	}
	return loadHostKey(path)
}

func loadHostKey(path string) (ssh.Signer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("sshd: host key %s has mode %04o: must not be readable by group or others", path, st.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("sshd: read host key %s: %w", path, err)
	}
	s, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("sshd: parse host key %s: %w", path, err)
	}
	return s, nil
}
