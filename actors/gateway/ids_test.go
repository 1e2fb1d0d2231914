package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/idrange"
)

// TestIDPoolRefused: a root gateway does not start with a uid pool that
// overlaps a range of the host's subordinate ids (a temporary file stands
// in for /etc/subuid): the error names the file, the line and the fix,
// and nothing was made (no store, no claims).
func TestIDPoolRefused(t *testing.T) {
	testenv.NeedRoot(t)
	dir := t.TempDir()
	subuid := filepath.Join(dir, "subuid")
	// Debian's useradd gives its users 65,536 ids each from 100000; one
	// given a range far up collides with the default pool.
	if err := os.WriteFile(subuid, []byte("alice:100000:65536\nbuilder:1879113728:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state, claims := filepath.Join(dir, "state"), filepath.Join(dir, "claims")
	err := Run(context.Background(), Config{StateDir: state, Listen: "127.0.0.1:0", Log: zerolog.Nop(),
		IDHostFiles: idrange.HostFiles{SubUID: subuid}, IDClaims: claims})
	if err == nil {
		t.Fatal("the gateway started with a pool overlapping the subordinate ids")
	}
	for _, w := range []string{subuid + " line 2", "builder", "1879113728-1879179263", "--uid-pool"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "state.db")); err == nil {
		t.Error("the refused gateway made its store")
	}
	if _, err := os.Stat(claims); err == nil {
		t.Error("the refused gateway made its claims")
	}
	// The same file with a pool clear of it: the check passes (the
	// gateway then goes on to listen; here it is only asked to check).
	p, _ := idrange.Parse("1879179264-1879244799")
	if _, err := idAllocator(Config{Log: zerolog.Nop(), IDPool: p, IDHostFiles: idrange.HostFiles{SubUID: subuid}, IDClaims: claims}); err != nil {
		t.Errorf("a pool clear of the file: %v", err)
	}
}
