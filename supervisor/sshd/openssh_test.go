package sshd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// openssh runs the system OpenSSH tools against a server on 127.0.0.1.
type openssh struct {
	t          *testing.T
	host, port string
	opts       []string
}

func newOpenSSH(t *testing.T, cfg Config) *openssh {
	testenv.NeedTool(t, "ssh", "openssh-client")
	_, addr := startServer(t, cfg)
	host, port, _ := net.SplitHostPort(addr)
	return &openssh{t: t, host: host, port: port, opts: []string{
		"-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
	}}
}

// run runs tool with the common options; it returns stdout, stderr and the
// exit code.
func (o *openssh) run(stdin []byte, env []string, tool string, args ...string) (string, string, int) {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, append(append([]string{}, o.opts...), args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		o.t.Fatalf("%s %v: %v", tool, args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// ssh runs `ssh [opts] -p PORT HOST command`.
func (o *openssh) ssh(stdin []byte, env []string, command string, opts ...string) (string, string, int) {
	o.t.Helper()
	return o.run(stdin, env, "ssh", append(opts, "-p", o.port, o.host, command)...)
}

func TestOpenSSHExec(t *testing.T) {
	o := newOpenSSH(t, Config{})

	out, errOut, code := o.ssh(nil, nil, "echo hi; exit 7")
	if out != "hi\n" || code != 7 {
		t.Fatalf("exec: out %q err %q code %d", out, errOut, code)
	}
	out, errOut, code = o.ssh(nil, nil, "echo to-out; echo to-err >&2")
	if out != "to-out\n" || errOut != "to-err\n" || code != 0 {
		t.Fatalf("streams: out %q err %q code %d", out, errOut, code)
	}
	// More output than the SSH window holds. The client's debug log shows
	// the order it processed: EOF (after all data), exit-status, close.
	out, errOut, code = o.ssh(nil, nil, "head -c 3000000 /dev/zero; exit 3", "-vv")
	if len(out) != 3000000 || code != 3 {
		t.Fatalf("large output: %d bytes, code %d", len(out), code)
	}
	eof := strings.Index(errOut, "channel 0: rcvd eof")
	status := strings.Index(errOut, "channel 0 rtype exit-status")
	closed := strings.Index(errOut, "channel 0: rcvd close")
	if eof < 0 || status < eof || closed < status {
		t.Fatalf("want EOF, exit-status, close in that order; client log:\n%s", errOut)
	}
	out, _, code = o.ssh([]byte("data\n"), nil, "cat")
	if out != "data\n" || code != 0 {
		t.Fatalf("stdin: %q %d", out, code)
	}
	out, errOut, code = o.ssh(nil, []string{"STOCKADE_T1=sent"}, `echo "$STOCKADE_T1 $STOCKADE_T2"`,
		"-o", "SendEnv=STOCKADE_T1", "-o", "SetEnv=STOCKADE_T2=set")
	if out != "sent set\n" || code != 0 {
		t.Fatalf("env: out %q err %q code %d", out, errOut, code)
	}
	out, errOut, code = o.ssh(nil, nil, "tty; exit 2", "-tt")
	if !strings.HasPrefix(out, "/dev/pts/") || code != 2 {
		t.Fatalf("tty: out %q err %q code %d", out, errOut, code)
	}
	// A login shell on a pty, fed from stdin.
	out, errOut, code = o.ssh([]byte("echo in-shell-$((6*7))\nexit 5\n"), nil, "", "-tt")
	if !strings.Contains(out, "in-shell-42") || code != 5 {
		t.Fatalf("shell: out %q err %q code %d", out, errOut, code)
	}
}

// scp of a 10 MiB random file in and out keeps its sha256, over sftp
// (OpenSSH's default) and over the legacy protocol (scp -O, `scp -t/-f`).
func TestOpenSSHScp(t *testing.T) {
	testenv.NeedTool(t, "scp", "openssh-client")
	if _, err := os.Stat(DefaultSFTPServer); err != nil {
		testenv.Unavailable(t, "%s missing (apt-get install openssh-sftp-server): %v", DefaultSFTPServer, err)
	}
	o := newOpenSSH(t, Config{})
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 10<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	for _, mode := range []struct{ name, flag string }{{"sftp", "-s"}, {"legacy", "-O"}} {
		remote := filepath.Join(dir, "remote-"+mode.name)
		back := filepath.Join(dir, "back-"+mode.name)
		for _, args := range [][]string{{src, o.host + ":" + remote}, {o.host + ":" + remote, back}} {
			if _, errOut, code := o.run(nil, nil, "scp", append([]string{"-q", mode.flag, "-P", o.port}, args...)...); code != 0 {
				t.Fatalf("scp %s %v: code %d: %s", mode.name, args, code, errOut)
			}
		}
		got, err := os.ReadFile(back)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != want {
			t.Fatalf("scp %s: checksum differs after the round trip (%d bytes back)", mode.name, len(got))
		}
	}
}
