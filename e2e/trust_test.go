package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// bareGateway starts a gateway with no sandboxes (no root needed): the
// trust tests need only its API.
func bareGateway(t *testing.T, args ...string) *world {
	t.Helper()
	files := t.TempDir()
	w := &world{t: t, state: filepath.Join(t.TempDir(), "state"), hosts: filepath.Join(files, "hosts"), gwArgs: args}
	write(t, w.hosts, "127.0.0.1 api.test\n")
	w.startGateway()
	t.Cleanup(w.shutdown)
	return w
}

// run runs the stockade binary with args (env added); it returns stdout,
// stderr and the exit code.
func run(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return runCmd(t, cmd)
}

// TestCAKeyReadableByOthersStopsTheGateway: a CA key of mode 0644 stops
// the gateway at start with the file and the fix named; nothing is
// rewritten.
func TestCAKeyReadableByOthersStopsTheGateway(t *testing.T) {
	w := bareGateway(t)
	w.shutdown()
	key := filepath.Join(w.state, "pki", "ca.key")
	before, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, errOut, code := run(t, nil, "gateway", "run", "--state-dir", w.state, "--listen", "127.0.0.1:0", "--relay-listen", "127.0.0.1:0", "--hosts", w.hosts)
	if code != 1 || !strings.Contains(errOut, key) || !strings.Contains(errOut, "chmod 600 "+key) || !strings.Contains(errOut, "0644") {
		t.Fatalf("gateway with a 0644 CA key: exit %d\n%s\nwant exit 1 naming %s, its mode and chmod 600", code, errOut, key)
	}
	after, _ := os.ReadFile(key)
	if st, _ := os.Stat(key); !bytes.Equal(before, after) || st.Mode().Perm() != 0o644 {
		t.Fatalf("the key was changed (mode %v)", st.Mode())
	}
	t.Logf("refused in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(errOut))
}

// TestClientIssueAndRevoke: `client issue` makes a 0600 bundle that works
// from another place (--config, STOCKADE_CONFIG); `client revoke` makes
// the gateway refuse it at the handshake while the admin's still works.
func TestClientIssueAndRevoke(t *testing.T) {
	w := bareGateway(t)
	bundle := filepath.Join(t.TempDir(), "eve.config")
	admin := []string{"--state-dir", w.state, "--gateway", w.addr}
	out, errOut, code := run(t, nil, append([]string{"client", "issue", "eve", "--role", "viewer", "--out", bundle}, admin...)...)
	if code != 0 || !strings.Contains(out, "client eve") {
		t.Fatalf("client issue: exit %d\n%s%s", code, out, errOut)
	}
	if st, err := os.Stat(bundle); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("bundle %s: %v %v, want mode 0600", bundle, st.Mode(), err)
	}
	// A second issue to the same file is refused, the file kept.
	if _, errOut, code := run(t, nil, append([]string{"client", "issue", "eve", "--role", "viewer", "--out", bundle}, admin...)...); code != 2 || !strings.Contains(errOut, "exists") {
		t.Fatalf("issue over an existing file: exit %d %s", code, errOut)
	}
	// Eve, elsewhere: no state dir, only the bundle (its gateway address inside).
	elsewhere := []string{"--state-dir", t.TempDir()}
	if out, errOut, code := run(t, nil, append([]string{"sandbox", "list", "--config", bundle}, elsewhere...)...); code != 0 || !strings.Contains(out, "NAME") {
		t.Fatalf("list with eve's bundle: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := run(t, []string{"STOCKADE_CONFIG=" + bundle}, append([]string{"sandbox", "list"}, elsewhere...)...); code != 0 {
		t.Fatalf("list with STOCKADE_CONFIG: exit %d %s", code, errOut)
	}
	// A bundle others can read is refused before anything is sent.
	loose := filepath.Join(t.TempDir(), "loose.config")
	b, _ := os.ReadFile(bundle)
	if err := os.WriteFile(loose, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, nil, append([]string{"sandbox", "list", "--config", loose}, elsewhere...)...); code != 5 || !strings.Contains(errOut, "chmod 600") {
		t.Fatalf("list with a 0644 bundle: exit %d %s, want 5 naming chmod 600", code, errOut)
	}
	out, errOut, code = run(t, nil, append([]string{"client", "revoke", "eve"}, admin...)...)
	if code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("client revoke: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = run(t, nil, append([]string{"sandbox", "list", "--config", bundle}, elsewhere...)...)
	if code != 5 || !strings.Contains(errOut, "refused this client's certificate") {
		t.Fatalf("list with a revoked bundle: exit %d %s, want 5 and the refusal", code, errOut)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		l := w.gwLog.String()
		return strings.Contains(l, `"reason":"handshake"`) && strings.Contains(l, "revoked")
	}, "the gateway to log the revoked handshake")
	if _, errOut, code := run(t, nil, append([]string{"sandbox", "list"}, admin...)...); code != 0 {
		t.Fatalf("the admin's list after revoking eve: exit %d %s", code, errOut)
	}
	// Revoking a name never issued says so.
	if _, errOut, code := run(t, nil, append([]string{"client", "revoke", "nobody-here"}, admin...)...); code != 3 {
		t.Fatalf("revoke an unknown client: exit %d %s, want 3", code, errOut)
	}
}

// TestNoGatewaySaysSoFirst: with no gateway and no configuration, the
// error says the gateway does not answer first (exit 5).
func TestNoGatewaySaysSoFirst(t *testing.T) {
	_, errOut, code := run(t, []string{"STOCKADE_CONFIG=", "HOME=" + t.TempDir(), "XDG_CONFIG_HOME="},
		"sandbox", "list", "--state-dir", t.TempDir(), "--gateway", "127.0.0.1:1")
	if code != 5 || !strings.HasPrefix(errOut, "stockade: gateway unreachable: no gateway answers") || !strings.Contains(errOut, "no client configuration") {
		t.Fatalf("list with no gateway: exit %d %q", code, errOut)
	}
}

// TestFaultsNeedChaos: without --chaos every fault request is refused with
// exit 2 (gateway and supervisors alike; the supervisor's refusal is
// checked in the supervisor package).
func TestFaultsNeedChaos(t *testing.T) {
	w := bareGateway(t)
	for _, args := range [][]string{{"fault", "--gateway", "store.write=error:1"}, {"fault", "any", "identity.lookup=panic:1"}} {
		_, errOut, code := run(t, []string{"STOCKADE_GATEWAY=" + w.addr}, append([]string{"sandbox", "--state-dir", w.state}, args...)...)
		if code != 2 || !strings.Contains(errOut, "--chaos") {
			t.Errorf("%v without --chaos: exit %d %q, want 2 naming --chaos", args, code, errOut)
		}
	}
	if err := syscall.Kill(w.gw.Process.Pid, 0); err != nil {
		t.Fatal(err)
	}
}
