package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// execIn runs `sandbox exec NAME -- sh -c SCRIPT`.
func (w *world) execIn(name, script string, extra ...string) (string, string, int) {
	w.t.Helper()
	return w.cli(append(append([]string{"exec", name}, extra...), "--", "/bin/sh", "-c", script)...)
}

// TestSeed000IdentityFailureDuringExec: while a long exec runs, identity
// lookups fail (error, then panic) on denied connections from inside; the
// clients get 403 identity_unavailable, audited; the exec finishes with its
// own status; no session or relay actor restarted; the sandbox stays Ready.
func TestSeed000IdentityFailureDuringExec(t *testing.T) {
	w := newWorld(t, 0, "--chaos")
	w.create("seed0", `exec sleep 1000`)
	type result struct {
		out  string
		code int
	}
	long := make(chan result, 1)
	go func() {
		out, _, code := w.execIn("seed0", `for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done; exit 3`)
		long <- result{out, code}
	}()
	time.Sleep(500 * time.Millisecond)
	for _, kind := range []string{"error", "panic"} {
		if _, errOut, code := w.cli("fault", "seed0", "identity.lookup="+kind+":2"); code != 0 {
			t.Fatalf("arm %s: %d %s", kind, code, errOut)
		}
		for i := 0; i < 2; i++ {
			out, _, code := w.execIn("seed0", fmt.Sprintf(`curl -sS -m 5 http://other.test:%d/`, w.webPort))
			if code != 0 || !strings.Contains(out, `"reason":"identity_unavailable"`) {
				t.Fatalf("denied connection under identity %s: exit %d %q", kind, code, out)
			}
		}
	}
	r := <-long
	if r.code != 3 || !strings.Contains(r.out, "tick 8") {
		t.Fatalf("long exec: exit %d, output %q; want exit 3 after tick 8", r.code, r.out)
	}
	out, _, _ := w.cli("logs", "seed0", "--audit")
	if n := strings.Count(out, "[reason:identity_unavailable]"); n != 4 {
		t.Fatalf("%d identity_unavailable audit lines, want 4:\n%s", n, out)
	}
	s, _ := w.get("seed0")
	if s.Phase != "Ready" || len(s.Transitions) != 2 {
		t.Fatalf("sandbox left Ready: %+v", s)
	}
	for _, kind := range []string{"sandbox", "session", "relay"} {
		n, ok := s.Restarts[kind]
		if !ok || n != 0 {
			t.Fatalf("restarts[%s] = %d (present %v); faults at connection level must stay there: %v", kind, n, ok, s.Restarts)
		}
	}
	for kind, n := range s.Restarts {
		if n != 0 {
			t.Fatalf("%s restarted %d times: %v", kind, n, s.Restarts)
		}
	}
}

// TestSeed004UnlistedNameThenExec: getent of a name in no policy fails and
// is audited policy_dns_ineligible; the next exec works; an allowed name on
// its port gets 200, on another port 403 endpoint_not_allowed.
func TestSeed004UnlistedNameThenExec(t *testing.T) {
	w := newWorld(t, 0)
	w.create("seed4", `exec sleep 1000`)
	if _, _, code := w.execIn("seed4", `getent hosts example.org`); code == 0 {
		t.Fatal("getent example.org succeeded inside the sandbox")
	}
	if out, _, code := w.execIn("seed4", `echo ok`); code != 0 || out != "ok\n" {
		t.Fatalf("exec after the unlisted name: %d %q", code, out)
	}
	out, _, _ := w.execIn("seed4", fmt.Sprintf(`curl -sS -m 5 -o /dev/null -w '%%{http_code}' http://api.test:%d/`, w.webPort))
	if out != "200" {
		t.Fatalf("allowed name and port: %q, want 200", out)
	}
	out, _, _ = w.execIn("seed4", fmt.Sprintf(`curl -sS -m 5 http://api.test:%d/`, w.webPort+1))
	if !strings.Contains(out, `"reason":"endpoint_not_allowed"`) {
		t.Fatalf("allowed name, other port: %q, want 403 endpoint_not_allowed", out)
	}
	logs, _, _ := w.cli("logs", "seed4", "--audit")
	if !strings.Contains(logs, "example.org") || !strings.Contains(logs, "[reason:policy_dns_ineligible]") {
		t.Fatalf("no policy_dns_ineligible for example.org:\n%s", logs)
	}
	if s, _ := w.get("seed4"); s.Phase != "Ready" || len(s.Transitions) != 2 {
		t.Fatalf("sandbox left Ready: %+v", s)
	}
}

// TestOpenSSHClient: plain ssh through ssh-config, and scp of 10 MiB in and
// out keeping its checksum.
func TestOpenSSHClient(t *testing.T) {
	w := newWorld(t, 0)
	sshBin := testenv.NeedTool(t, "ssh", "openssh-client")
	scpBin := testenv.NeedTool(t, "scp", "openssh-client")
	if _, err := os.Stat("/usr/lib/openssh/sftp-server"); err != nil {
		testenv.Unavailable(t, "sftp-server missing (apt-get install openssh-sftp-server)")
	}
	s := w.create("sshbox", `exec sleep 1000`)
	// ssh-config pins the host key in the user's config dir: a private one.
	env := append(os.Environ(), "STOCKADE_GATEWAY="+w.addr, "XDG_CONFIG_HOME="+t.TempDir())
	c := exec.Command(bin, "sandbox", "--state-dir", w.state, "ssh-config", "sshbox")
	c.Env = env
	cfgOut, errOut, code := runCmd(t, c)
	if code != 0 {
		t.Fatalf("ssh-config: %d %s", code, errOut)
	}
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	write(t, cfg, cfgOut)
	run := func(bin string, args ...string) string {
		c := exec.Command(bin, append([]string{"-F", cfg}, args...)...)
		c.Env = env
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	if out := run(sshBin, "sshbox", "echo", "hi"); out != "hi\n" {
		t.Fatalf("ssh sshbox echo hi: %q", out)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "in")
	data := make([]byte, 10<<20)
	_, _ = rand.Read(data)
	write(t, src, string(data))
	run(scpBin, src, "sshbox:/sandbox/copied")
	inside, err := os.ReadFile(filepath.Join(s.Workspace, "copied"))
	if err != nil || sha256.Sum256(inside) != sha256.Sum256(data) {
		t.Fatalf("scp in: checksum differs (%v)", err)
	}
	back := filepath.Join(dir, "back")
	run(scpBin, "sshbox:/sandbox/copied", back)
	got, err := os.ReadFile(back)
	if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("scp out: checksum differs (%v)", err)
	}
}

// TestConcurrentExecsWithACutRelay: 50 concurrent execs against one sandbox
// while one relay is cut (its client killed mid-stream): every other exec
// ends with its own exit status, and the sandbox stays Ready.
func TestConcurrentExecsWithACutRelay(t *testing.T) {
	w := newWorld(t, 0)
	w.create("many", `exec sleep 1000`)
	victim := exec.Command(bin, "sandbox", "--state-dir", w.state, "exec", "many", "--", "/bin/sh", "-c", "echo started; exec sleep 30")
	victim.Env = append(os.Environ(), "STOCKADE_GATEWAY="+w.addr)
	stdout, _ := victim.StdoutPipe()
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatalf("victim exec never started: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, errOut, code := w.execIn("many", fmt.Sprintf("sleep 0.5; echo %d; exit %d", i, i%256))
			if code != i%256 || out != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Sprintf("exec %d: exit %d, out %q, err %q", i, code, out, errOut)
			}
		}(i)
	}
	time.Sleep(200 * time.Millisecond)
	_ = victim.Process.Signal(syscall.SIGKILL) // cut that relay mid-stream
	_ = victim.Wait()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if s, _ := w.get("many"); s.Phase != "Ready" {
		t.Fatalf("sandbox left Ready: %+v", s)
	}
}

// TestExecReplacesTheShell: the command of `sandbox exec` replaces the
// sandbox shell that receives it, so no shell waits beside it for as long
// as it runs (its parent is not a shell) and a signal that ends it is the
// session's (the CLI says so and exits 128+N); a plain exit status passes
// through unchanged.
func TestExecReplacesTheShell(t *testing.T) {
	w := newWorld(t, 0)
	w.create("replaced", `exec sleep 1000`)
	out, errOut, code := w.execIn("replaced", `cat /proc/$PPID/comm`)
	if code != 0 || strings.TrimSpace(out) == "sh" || out == "" {
		t.Fatalf("parent of the command: %q (exit %d, %q); want the session's starter, not a shell left waiting", out, code, errOut)
	}
	_, errOut, code = w.execIn("replaced", `kill -TERM $$`)
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(errOut, "killed by SIGTERM") {
		t.Fatalf("command killed by SIGTERM: exit %d, stderr %q; want %d and the signal named", code, errOut, 128+int(syscall.SIGTERM))
	}
	if _, _, code = w.execIn("replaced", `exit 9`); code != 9 {
		t.Fatalf("exit 9: got %d", code)
	}
}
