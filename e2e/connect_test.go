package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestConnectExitCodes: `sandbox connect` exits with the shell's status;
// when no relay can be opened, connect and ssh-proxy print the stockade
// message only (nothing of ssh's "kex_exchange_identification") and exit
// 4 (a stopped sandbox), 3 (no such sandbox) or 5 (no gateway); connect
// leaves no temp files behind; ssh-proxy never writes its status over an
// existing file.
func TestConnectExitCodes(t *testing.T) {
	w := newWorld(t, 0)
	testenv.NeedTool(t, "ssh", "openssh-client")
	w.create("conn", `exec sleep 1000`)
	tmp := t.TempDir()
	client := func(stdin string, env []string, args ...string) (string, string, int) {
		t.Helper()
		c := exec.Command(bin, append([]string{"sandbox", "--state-dir", w.state}, args...)...)
		c.Env = append(append(os.Environ(), "STOCKADE_GATEWAY="+w.addr, "TMPDIR="+tmp), env...)
		c.Stdin = strings.NewReader(stdin)
		return runCmd(t, c)
	}
	out, errOut, code := client("echo hello from inside; exit 7\n", nil, "connect", "conn")
	if code != 7 || out != "hello from inside\n" {
		t.Fatalf("connect to a Ready sandbox: exit %d %q %s; want 7 and the shell's output", code, out, errOut)
	}

	if _, errOut, code := w.cli("stop", "conn"); code != 0 {
		t.Fatalf("stop: %d %s", code, errOut)
	}
	w.waitPhase("conn", "Stopped", 30*time.Second, nil)
	only := func(what, errOut string, code, want int, says string) {
		t.Helper()
		lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
		if code != want || len(lines) != 1 || !strings.HasPrefix(lines[0], "stockade: ") || !strings.Contains(lines[0], says) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and one stockade line containing %q", what, code, errOut, want, says)
		}
	}
	_, errOut, code = client("", nil, "connect", "conn")
	only("connect to a stopped sandbox", errOut, code, 4, "Stopped")
	_, errOut, code = client("", nil, "ssh-proxy", "conn")
	only("ssh-proxy to a stopped sandbox", errOut, code, 4, "Stopped")
	_, errOut, code = client("", nil, "connect", "nosuch")
	only("connect to no such sandbox", errOut, code, 3, "nosuch")
	_, errOut, code = client("", []string{"STOCKADE_GATEWAY=127.0.0.1:1"}, "connect", "conn")
	only("connect without a gateway", errOut, code, 5, "127.0.0.1:1")

	// ssh-proxy asked to leave its status on an existing file: the file
	// stays as it was and the message goes to stderr.
	victim := tmp + "/victim"
	write(t, victim, "keep me\n")
	_, errOut, code = client("", []string{"STOCKADE_SSH_PROXY_STATUS=" + victim}, "ssh-proxy", "conn")
	only("ssh-proxy with an existing status file", errOut, code, 4, "Stopped")
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("ssh-proxy overwrote %s: %q", victim, b)
	}
	_ = os.Remove(victim)
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("connect left files in TMPDIR: %v", ents)
	}
}
