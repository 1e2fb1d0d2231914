package sshd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves cfg (HostSpawner and a temporary host key unless
// set) on 127.0.0.1:0 and returns the server and its address.
func startServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.HostKeyPath == "" {
		cfg.HostKeyPath = filepath.Join(t.TempDir(), "keys", "host_ed25519")
	}
	if cfg.Spawner == nil {
		cfg.Spawner = HostSpawner{}
	}
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, ln.Addr().String()
}

func dial(t *testing.T, srv *Server, addr, user string) *ssh.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: user, HostKeyCallback: ssh.FixedHostKey(srv.HostKey()), Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", addr, user, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newSession(t *testing.T, c *ssh.Client) *ssh.Session {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func exitStatus(t *testing.T, err error) *ssh.ExitError {
	t.Helper()
	var ee *ssh.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("want *ssh.ExitError, got %T %v", err, err)
	}
	return ee
}

func TestGoClientExitStatusStreamsAndEnv(t *testing.T) {
	srv, addr := startServer(t, Config{Env: []string{DefaultPath, "BASE=1", "OVER=base"}})
	c := dial(t, srv, addr, "tester")

	s := newSession(t, c)
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	ee := exitStatus(t, s.Run("echo out; echo err >&2; exit 3"))
	if ee.ExitStatus() != 3 || out.String() != "out\n" || errb.String() != "err\n" {
		t.Fatalf("status %d stdout %q stderr %q", ee.ExitStatus(), out.String(), errb.String())
	}

	s = newSession(t, c)
	for k, v := range map[string]string{"FOO": "bar baz", "OVER": "client"} {
		if err := s.Setenv(k, v); err != nil {
			t.Fatalf("setenv %s: %v", k, err)
		}
	}
	got, err := s.Output(`printf '%s|%s|%s|%s' "$FOO" "$BASE" "$OVER" "$(env | grep -c '^OVER=')"`)
	if err != nil || string(got) != "bar baz|1|client|1" {
		t.Fatalf("env: %q %v", got, err)
	}

	// 1 MiB of stdin through sha256sum: forwarding, flow control, half-close.
	s = newSession(t, c)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	s.Stdin = bytes.NewReader(data)
	got, err = s.Output("wc -c")
	if err != nil || strings.TrimSpace(string(got)) != strconv.Itoa(len(data)) {
		t.Fatalf("stdin: %q %v", got, err)
	}

	// Shell without a pty reads commands from stdin.
	s = newSession(t, c)
	s.Stdin = strings.NewReader("echo shell-ok\nexit 4\n")
	var sh bytes.Buffer
	s.Stdout = &sh
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	if ee := exitStatus(t, s.Wait()); ee.ExitStatus() != 4 || sh.String() != "shell-ok\n" {
		t.Fatalf("shell: status %d out %q", ee.ExitStatus(), sh.String())
	}
	if st := srv.Stats(); st.Connections != 1 || st.Sessions != 4 || st.Panics != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGoClientSignal(t *testing.T) {
	srv, addr := startServer(t, Config{})
	s := newSession(t, dial(t, srv, addr, "tester"))
	out, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("echo started; exec sleep 30"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "started\n" {
		t.Fatalf("read %q %v", line, err)
	}
	if err := s.Signal(ssh.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ee := exitStatus(t, s.Wait()); ee.Signal() != "TERM" {
		t.Fatalf("exit signal %q (status %d)", ee.Signal(), ee.ExitStatus())
	}
}

func TestPtyAndWindowChange(t *testing.T) {
	srv, addr := startServer(t, Config{})
	c := dial(t, srv, addr, "tester")

	// Size set before the command runs.
	s := newSession(t, c)
	if err := s.RequestPty("xterm-256color", 40, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	if err := s.WindowChange(50, 132); err != nil {
		t.Fatal(err)
	}
	got, err := s.Output(`stty size; echo "$TERM"; tty`)
	lines := strings.Split(strings.ReplaceAll(string(got), "\r\n", "\n"), "\n")
	if err != nil || len(lines) < 3 || lines[0] != "50 132" || lines[1] != "xterm-256color" || !strings.HasPrefix(lines[2], "/dev/pts/") {
		t.Fatalf("pty output %q err %v", got, err)
	}

	// A change while the command runs reaches it (SIGWINCH, new size).
	s = newSession(t, c)
	if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
		t.Fatal(err)
	}
	out, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(`trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done`); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "ready\r\n" {
		t.Fatalf("read %q %v", buf, err)
	}
	if err := s.WindowChange(33, 99); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(out)
	if err := s.Wait(); err != nil || strings.TrimSpace(string(rest)) != "33 99" {
		t.Fatalf("after window change: %q %v", rest, err)
	}
}

// A client that disconnects mid-command gets its process hung up.
func TestDisconnectHangsUpProcess(t *testing.T) {
	srv, addr := startServer(t, Config{HangupGrace: 500 * time.Millisecond})
	c := dial(t, srv, addr, "tester")
	s := newSession(t, c)
	out, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// trap '' HUP: only the SIGKILL after the grace ends it.
	if err := s.Start(`trap '' HUP; echo $$; exec sleep 30`); err != nil {
		t.Fatal(err)
	}
	var pidLine []byte
	for b := make([]byte, 1); !bytes.HasSuffix(pidLine, []byte("\n")); pidLine = append(pidLine, b[0]) {
		if _, err := out.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidLine)))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	testenv.Eventually(t, 5*time.Second, func() bool { return unix.Kill(pid, 0) == unix.ESRCH },
		"process %d still alive after its client left", pid)
	testenv.Eventually(t, 5*time.Second, func() bool { return srv.Stats().ActiveSessions == 0 }, "session still active")
}

// A background child holding stdout open does not keep the exit status
// from the client beyond DrainTimeout.
func TestBackgroundChildDoesNotHoldExit(t *testing.T) {
	srv, addr := startServer(t, Config{DrainTimeout: 200 * time.Millisecond})
	s := newSession(t, dial(t, srv, addr, "tester"))
	start := time.Now()
	got, err := s.Output(`echo $$; sleep 5 & echo done`)
	elapsed := time.Since(start)
	fields := strings.Fields(string(got))
	if err != nil || len(fields) != 2 || fields[1] != "done" || elapsed > 3*time.Second {
		t.Fatalf("output %q err %v after %s", got, err, elapsed)
	}
	if pgid, err := strconv.Atoi(fields[0]); err == nil {
		_ = unix.Kill(-pgid, syscall.SIGKILL) // the orphaned sleep
	}
}

// panicSpawner injects a panic into the session that starts "PANIC".
type panicSpawner struct{ HostSpawner }

func (p panicSpawner) Spawn(ctx context.Context, req SpawnRequest) (Proc, error) {
	if strings.Contains(strings.Join(req.Argv, " "), "PANIC") {
		panic("injected spawn panic")
	}
	return p.HostSpawner.Spawn(ctx, req)
}

func TestPanicEndsOnlyItsChannel(t *testing.T) {
	srv, addr := startServer(t, Config{Spawner: panicSpawner{}})
	c := dial(t, srv, addr, "tester")
	other := dial(t, srv, addr, "tester")

	long := newSession(t, other) // a session in flight on another connection
	longOut, err := long.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := long.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Start("read x && echo long-ok"); err != nil {
		t.Fatal(err)
	}

	if err := newSession(t, c).Run("echo PANIC"); err == nil {
		t.Fatal("panicking session reported success")
	}
	if got, err := newSession(t, c).Output("echo same-conn-ok"); err != nil || string(got) != "same-conn-ok\n" {
		t.Fatalf("same connection after panic: %q %v", got, err)
	}
	if _, err := io.WriteString(stdin, "\n"); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	got, _ := io.ReadAll(longOut)
	if err := long.Wait(); err != nil || string(got) != "long-ok\n" {
		t.Fatalf("other connection: %q %v", got, err)
	}
	if p := srv.Stats().Panics; p != 1 {
		t.Fatalf("panics counted %d, want 1", p)
	}
}

func TestRefusals(t *testing.T) {
	srv, addr := startServer(t, Config{
		SFTPServer: "/nonexistent/sftp-server",
		Authorize:  func(m ssh.ConnMetadata) bool { return m.User() == "alice" },
	})
	if _, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "bob", HostKeyCallback: ssh.FixedHostKey(srv.HostKey())}); err == nil {
		t.Fatal("unauthorized user got in")
	}
	c := dial(t, srv, addr, "alice")
	if conn, err := c.Dial("tcp", "127.0.0.1:1"); err == nil {
		conn.Close()
		t.Fatal("direct-tcpip forwarding was accepted")
	}
	s := newSession(t, c)
	stderr, _ := s.StderrPipe()
	if err := s.RequestSubsystem("sftp"); err == nil {
		t.Fatal("sftp accepted without an sftp-server")
	}
	s.Close()
	msg, _ := io.ReadAll(stderr)
	if !strings.Contains(string(msg), "sftp subsystem unavailable") {
		t.Fatalf("stderr %q", msg)
	}
	if err := newSession(t, c).RequestSubsystem("nope"); err == nil {
		t.Fatal("unknown subsystem accepted")
	}
}

func TestServeConnEndsWithContext(t *testing.T) {
	srv, err := New(Config{HostKeyPath: filepath.Join(t.TempDir(), "hk"), Spawner: HostSpawner{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- srv.ServeConn(ctx, c)
	}()
	c := dial(t, srv, ln.Addr().String(), "relay")
	s := newSession(t, c)
	if err := s.Start("exec sleep 30"); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeConn: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeConn did not return after cancel")
	}
	if err := s.Wait(); err == nil {
		t.Fatal("session reported success after its connection was cut")
	}
	if st := srv.Stats(); st.ActiveSessions != 0 || st.ActiveConnections != 0 {
		t.Fatalf("stats after cancel %+v", st)
	}
	srv.Close()
	a, b := net.Pipe()
	defer b.Close()
	if err := srv.ServeConn(context.Background(), a); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("ServeConn after Close: %v", err)
	}
}

func TestHostKeyPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "host_ed25519")
	var keys [][]byte
	for range 2 {
		srv, err := New(Config{HostKeyPath: path, Spawner: HostSpawner{}})
		if err != nil {
			t.Fatal(err)
		}
		if srv.HostKey().Type() != ssh.KeyAlgoED25519 {
			t.Fatalf("host key type %s", srv.HostKey().Type())
		}
		keys = append(keys, srv.HostKey().Marshal())
	}
	if !bytes.Equal(keys[0], keys[1]) {
		t.Fatal("host key changed between two servers on the same path")
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st.Mode(), err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateHostKey(path); err == nil || !strings.Contains(err.Error(), "mode 0644") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
}

func TestSignalNames(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1} {
		if got := ParseSignal(SignalName(sig)); got != sig {
			t.Errorf("%v -> %q -> %v", sig, SignalName(sig), got)
		}
	}
	if SignalName(syscall.SIGTERM) != string(ssh.SIGTERM) || ParseSignal("NOPE") != 0 {
		t.Fatal("SSH signal names")
	}
}
