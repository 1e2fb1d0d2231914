package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/crypto/ssh"

	"github.com/stockade-dev/stockade/actors/sandbox"
	"github.com/stockade-dev/stockade/client"
)

// The system ssh (ssh-config's Host block, connect) checks the sandbox's
// host key against a known_hosts line holding the key the gateway vouches
// for: the one the sandbox's supervisor sent in its Hello over mutual TLS,
// returned with every relay (messages.Reply.host_key). The line is keyed by
// a HostKeyAlias, so it matches whatever name the user's Host block or
// command line gives.

// knownHostsEnv names the file where `ssh-proxy`, run by `connect`'s ssh
// as its ProxyCommand, writes the host key the gateway vouched for with
// this very relay, before any byte of the sandbox's SSH server reaches ssh
// (which reads the file when the key exchange is done).
const knownHostsEnv = "STOCKADE_SSH_KNOWN_HOSTS"

// hostKeyAlias is the name ssh looks the sandbox's key up under:
// NAME.GATEWAY.stockade, GATEWAY a digest of the CA the client trusts (one
// per gateway or cluster), so two gateways' sandboxes of one name differ.
func hostKeyAlias(name string, cfg *client.Config) string {
	ca := []byte(cfg.CA)
	if b, _ := pem.Decode(ca); b != nil {
		ca = b.Bytes
	}
	sum := sha256.Sum256(ca)
	return name + "." + hex.EncodeToString(sum[:6]) + ".stockade"
}

// knownHostsLine is the known_hosts line for alias from the gateway's
// host_key (authorized_keys form), which is checked first: it came over the
// wire.
func knownHostsLine(alias, hostKey string) ([]byte, error) {
	if hostKey == "" {
		return nil, errors.New("the gateway has no host key for it (its supervisor reported none); restart the sandbox")
	}
	key, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(hostKey))
	if err != nil || len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("the gateway's host key for it is not one authorized_keys line (%v)", err)
	}
	return append([]byte(alias+" "), ssh.MarshalAuthorizedKey(key)...), nil
}

// userKnownHostsFile is where ssh-config pins sandbox alias's host key:
// ~/.config/stockade/known_hosts.d/ALIAS (the user's config dir, beside the
// default client configuration).
func userKnownHostsFile(alias string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory for the sandbox's known_hosts file: %w (set HOME or XDG_CONFIG_HOME)", err)
	}
	return filepath.Join(dir, "stockade", "known_hosts.d", alias), nil
}

// pinHostKey writes line as the whole of path (0600), replacing what it
// held. Its directory is made 0700 if missing, and must be this user's
// and writable by no one else: a file there decides whom ssh talks to.
func pinHostKey(path string, line []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("known_hosts directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("known_hosts directory: %w", err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || st == nil || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("known_hosts directory %s must be a directory of this user that no one else can write (mode %s): fix it (chmod 700), or remove it", dir, fi.Mode())
	}
	tmp, err := os.CreateTemp(dir, ".pin-*")
	if err != nil {
		return fmt.Errorf("known_hosts: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(line)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("known_hosts %s: %w", path, err)
	}
	return nil
}

// writeNewKnownHosts writes line to path, which must not exist yet (it is
// connect's private file, named by knownHostsEnv).
func writeNewKnownHosts(path string, line []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s=%s already exists: it is not overwritten", knownHostsEnv, path)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", knownHostsEnv, err)
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkSandboxName refuses a name no sandbox can have before it becomes
// part of a path or an ssh option.
func checkSandboxName(name string) error {
	if err := sandbox.CheckName(name); err != nil {
		return &exitError{exitUsage, err}
	}
	return nil
}

// sshQuote quotes an ssh_config value holding blanks.
func sshQuote(v string) string {
	if strings.ContainsAny(v, " \t") {
		return `"` + v + `"`
	}
	return v
}
