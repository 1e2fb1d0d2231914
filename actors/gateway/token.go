package gateway

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade-dev/stockade/client"
)

// ensureToken returns the client token of stateDir, creating it (32 random
// bytes, hex, mode 0600) on first start. A token kept across restarts keeps
// clients and supervisors working through a gateway restart.
func ensureToken(stateDir string) (string, error) {
	p := filepath.Join(stateDir, client.TokenFile)
	b, err := os.ReadFile(p)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("client token %s is too short (%d chars): delete it and restart the gateway to make a new one", p, len(tok))
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read client token %s: %w", p, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make client token: %w", err)
	}
	tok := hex.EncodeToString(raw)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write client token: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("install client token %s: %w", p, err)
	}
	return tok, nil
}

// tokenOK compares in constant time.
func tokenOK(want, got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
