package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestSetuidInWorkspaceInert plays a sandbox root that leaves a setuid
// program (its own uid 0's, mode 4755) in the workspace for a run_as_user
// workload: run, it keeps the workload's euid; and /sandbox, /tmp,
// /dev/shm and the policy's read_write host directory are nosuid,nodev in
// the workload's /proc/self/mountinfo.
func TestSetuidInWorkspaceInert(t *testing.T) {
	w := prepareWorld(t, 0)
	// A state dir of an earlier version, whose sandbox dirs others could
	// traverse.
	if err := os.MkdirAll(filepath.Join(contract.StateDir(w.state).Sandboxes(), "suid"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.startGateway()
	t.Cleanup(w.shutdown)
	rw := testenv.OpenHostDir(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, policy, fmt.Sprintf(`version: 1
filesystem_policy:
  read_only: [/usr, /lib, /lib64, /bin, /sbin, /etc, /proc]
  read_write: [/sandbox, /tmp, /dev/shm, /dev/null, %s]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: "1000"
  run_as_group: "1000"
`, rw))
	w.policy = policy
	s := w.create("suid", `cat /proc/self/uid_map > /sandbox/uid_map
cat /proc/self/mountinfo > /sandbox/mountinfo
while [ ! -e /sandbox/go ]; do sleep 0.1; done
{ stat -c %u /sandbox/suid-id; /sandbox/suid-id -u; id -u; } > /sandbox/euid.tmp 2>&1; mv /sandbox/euid.tmp /sandbox/euid
exec sleep 1000`)
	// The program is the sandbox root's: the host uid its uid 0 maps to.
	fields := strings.Fields(w.file(s, "uid_map"))
	if len(fields) < 3 || fields[0] != "0" {
		t.Fatalf("the workload's uid_map: %q", fields)
	}
	rootUID, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(s.Workspace, "suid-id")
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(prog, rootUID, rootUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(prog, 0o4755); err != nil { // after the chown, which clears it
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Workspace, "go"), "")
	if got := strings.Fields(w.file(s, "euid")); !slices.Equal(got, []string{"0", "1000", "1000"}) {
		t.Errorf("owner of the program inside, euid it ran with, the workload's uid: %q; want 0 1000 1000", got)
	}
	opts := map[string]string{}
	for _, line := range strings.Split(w.file(s, "mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			opts[f[4]] = f[5]
		}
	}
	for _, m := range []string{"/sandbox", "/tmp", "/dev/shm", rw} {
		have := strings.Split(opts[m], ",")
		if !slices.Contains(have, "nosuid") || !slices.Contains(have, "nodev") {
			t.Errorf("%s is mounted %q inside, want nosuid,nodev", m, opts[m])
		}
	}
	// On the host the file is setuid the sandbox root's host uid: no
	// other host user may reach it (the sandboxes dir is 0700, whatever
	// the state dir's mode).
	cmd := exec.Command(prog, "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("host uid %d reached and ran the sandbox root's setuid program in the workspace (euid %s)", nobody, strings.TrimSpace(string(out)))
	}
}

// TestReadWriteLinkNotFollowed plays a workload that replaces read_write
// paths of its policy by links, one to a directory the policy lets it
// only read, one to a host directory outside the policy, for its next
// start to grant it write access there: at the next start neither link is
// followed (best_effort: skipped, said in the supervisor's log), writing
// through them fails and both directories stay empty.
func TestReadWriteLinkNotFollowed(t *testing.T) {
	w := newWorld(t, 0)
	readOnly, outside := testenv.OpenHostDir(t), testenv.OpenHostDir(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	write(t, policy, fmt.Sprintf(`version: 1
filesystem_policy:
  read_only: [/usr, /lib, /lib64, /bin, /sbin, /etc, %s]
  read_write: [/sandbox, /sandbox/cache, /sandbox/out, /tmp, /dev/null]
landlock:
  compatibility: best_effort
`, readOnly))
	w.policy = policy
	try := func(p string) string {
		return fmt.Sprintf(`if { echo pwned > %s/pwned; } 2>/dev/null; then echo written; else echo refused; fi`, p)
	}
	s := w.create("relink", fmt.Sprintf(`if [ -L /sandbox/cache ]; then
  { %s; %s; } > /sandbox/result
else
  rm -rf /sandbox/cache /sandbox/out
  ln -s %s /sandbox/cache && ln -s %s /sandbox/out && echo planted > /sandbox/planted
fi
exec sleep 1000`, try("/sandbox/cache"), try("/sandbox/out"), readOnly, outside))
	w.file(s, "planted")
	if _, errOut, code := w.cli("stop", "relink"); code != 0 {
		t.Fatalf("stop: %d %s", code, errOut)
	}
	if _, errOut, code := w.cli("start", "relink"); code != 0 {
		t.Fatalf("start: %d %s", code, errOut)
	}
	if got := strings.Fields(w.file(s, "result")); !slices.Equal(got, []string{"refused", "refused"}) {
		t.Errorf("writing through the links at the next start: %q, want refused twice", got)
	}
	for _, d := range []string{readOnly, outside} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("%s holds %v after the attack (%v)", d, ents, err)
		}
	}
	log, _ := os.ReadFile(sandboxLog(w.state, "relink", contract.SupervisorLog))
	for _, p := range []string{"/sandbox/cache", "/sandbox/out"} {
		if !bytes.Contains(log, []byte("read_write "+p+" skipped: "+p+" is a symbolic link in a directory the workload can write (/sandbox)")) {
			t.Errorf("the supervisor's log does not say %s was skipped as a link:\n%s", p, log)
		}
	}
}

// TestSSHConfigPinsHostKey: ssh-config pins the host key the gateway
// vouches for (a 0600 known_hosts file of the user's, HostKeyAlias, strict
// checking), under any Host name; once the sandbox presents another key
// (its key file replaced while it was stopped), the real OpenSSH client
// refuses it and runs nothing, while connect, pinning the key the gateway
// vouches for with each relay, and a new ssh-config follow the gateway.
func TestSSHConfigPinsHostKey(t *testing.T) {
	w := newWorld(t, 0)
	sshBin := testenv.NeedTool(t, "ssh", "openssh-client")
	keygen := testenv.NeedTool(t, "ssh-keygen", "openssh-client")
	s := w.create("pinned", `exec sleep 1000`)
	home := t.TempDir()
	env := append(os.Environ(), "STOCKADE_GATEWAY="+w.addr, "XDG_CONFIG_HOME="+home)
	run := func(stdin string, name string, args ...string) (string, string, int) {
		t.Helper()
		c := exec.Command(name, args...)
		c.Env, c.Stdin = env, strings.NewReader(stdin)
		return runCmd(t, c)
	}
	sshConfig := func() string {
		t.Helper()
		out, errOut, code := run("", bin, "sandbox", "--state-dir", w.state, "ssh-config", "pinned")
		if code != 0 {
			t.Fatalf("ssh-config: exit %d %s", code, errOut)
		}
		return out
	}
	out := sshConfig()
	var known string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "UserKnownHostsFile "); ok {
			known = v
		}
	}
	for _, want := range []string{"  StrictHostKeyChecking yes\n", "  HostKeyAlias pinned.", "  UserKnownHostsFile " + filepath.Join(home, "stockade", "known_hosts.d") + "/pinned."} {
		if !strings.Contains(out, want) {
			t.Errorf("ssh-config lacks %q:\n%s", want, out)
		}
	}
	fi, err := os.Stat(known)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("known_hosts file %s: %v %v, want mode 0600", known, fi, err)
	}
	// The pinned key is the sandbox's own (its supervisor's key file).
	keyFile := filepath.Join(filepath.Dir(s.Workspace), "ssh_host_ed25519_key")
	pub, errOut, code := run("", keygen, "-y", "-f", keyFile)
	if code != 0 {
		t.Fatalf("ssh-keygen -y: %d %s", code, errOut)
	}
	pinned, _ := os.ReadFile(known)
	if !keysEqual(t, pub, pinned) {
		t.Fatalf("pinned %q, the sandbox's key is %q", pinned, pub)
	}
	// The user's own name for it: the alias still finds the key.
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	write(t, cfg, strings.Replace(out, "Host pinned\n", "Host my-box\n", 1))
	if out, errOut, code := run("", sshBin, "-F", cfg, "my-box", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("ssh my-box echo hi: exit %d %q %s", code, out, errOut)
	}

	// Another key behind the same name.
	if _, errOut, code := w.cli("stop", "pinned"); code != 0 {
		t.Fatalf("stop: %d %s", code, errOut)
	}
	fresh := filepath.Join(t.TempDir(), "key")
	if _, errOut, code := run("", keygen, "-q", "-t", "ed25519", "-N", "", "-f", fresh); code != 0 {
		t.Fatalf("ssh-keygen: %d %s", code, errOut)
	}
	b, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := w.cli("start", "pinned"); code != 0 {
		t.Fatalf("start: %d %s", code, errOut)
	}
	_, errOut, code = run("", sshBin, "-F", cfg, "my-box", "touch", "/sandbox/ran")
	if code != 255 || !strings.Contains(errOut, "Host key verification failed") {
		t.Errorf("ssh to a sandbox presenting another key: exit %d %q; want 255 and ssh's host key refusal", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace, "ran")); err == nil {
		t.Error("the command ran behind a host key that was not the pinned one")
	}
	if after, _ := os.ReadFile(known); !bytes.Equal(after, pinned) {
		t.Errorf("the pinned key changed without ssh-config: %q", after)
	}

	// connect pins, for each relay, the key the gateway vouches for now.
	if out, errOut, code := run("echo via-connect; exit 3\n", bin, "sandbox", "--state-dir", w.state, "connect", "pinned"); code != 3 || out != "via-connect\n" {
		t.Errorf("connect after the key changed: exit %d %q %s; want 3 and the shell's output", code, out, errOut)
	}
	// ssh-config again pins the new key.
	out = sshConfig()
	write(t, cfg, strings.Replace(out, "Host pinned\n", "Host my-box\n", 1))
	if out, errOut, code := run("", sshBin, "-F", cfg, "my-box", "echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("ssh after ssh-config pinned the new key: exit %d %q %s", code, out, errOut)
	}
}

// keysEqual compares an authorized_keys line with a known_hosts line's key.
func keysEqual(t *testing.T, authorized string, knownHosts []byte) bool {
	t.Helper()
	a, _, _, _, err := ssh.ParseAuthorizedKey([]byte(authorized))
	if err != nil {
		t.Fatalf("public key %q: %v", authorized, err)
	}
	_, hosts, k, _, _, err := ssh.ParseKnownHosts(knownHosts)
	if err != nil || len(hosts) != 1 {
		t.Fatalf("known_hosts %q: %v", knownHosts, err)
	}
	return bytes.Equal(a.Marshal(), k.Marshal())
}
