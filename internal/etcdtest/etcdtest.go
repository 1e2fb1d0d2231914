// Package etcdtest starts a real etcd server (Debian's etcd-server) for
// tests, on free ports of 127.0.0.1 with a temporary data dir, and lets a
// test kill, restart and pause it. Outside CI a missing etcd skips the
// test; in CI it fails (testenv.NeedTool).
package etcdtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// Server is a real etcd, one member, on 127.0.0.1.
type Server struct {
	// Endpoint is the client URL (http://127.0.0.1:PORT).
	Endpoint string
	bin      string
	dataDir  string
	peer     string
	out      *testenv.Buffer
	// TLS is set by StartTLS: the files and a client configuration.
	TLS *TLSFiles

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts etcd and waits until it is healthy; the test's cleanup
// stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		bin:      testenv.NeedTool(t, "etcd", "etcd-server"),
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		peer:     fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		dataDir:  t.TempDir(),
		out:      &testenv.Buffer{},
	}
	s.start(t, "new")
	t.Cleanup(func() { s.Stop(t) })
	return s
}

func (s *Server) start(t testing.TB, state string) {
	t.Helper()
	var tlsArgs []string
	if s.TLS != nil {
		tlsArgs = []string{"--cert-file", s.TLS.ServerCert, "--key-file", s.TLS.ServerKey,
			"--trusted-ca-file", s.TLS.CA, "--client-cert-auth"}
	}
	cmd := exec.Command(s.bin, append(tlsArgs,
		"--name", "test",
		"--data-dir", s.dataDir,
		"--listen-client-urls", s.Endpoint,
		"--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", "test="+s.peer,
		"--initial-cluster-state", state,
		"--logger", "zap", "--log-level", "warn",
	)...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	s.waitHealthy(t, done)
}

func (s *Server) waitHealthy(t testing.TB, done chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	if s.TLS != nil {
		hc.Transport = &http.Transport{TLSClientConfig: s.TLS.Client(t)}
	}
	for {
		select {
		case <-done:
			t.Fatalf("etcd exited before it was healthy:\n%s", s.out)
		default:
		}
		if resp, err := hc.Get(s.Endpoint + "/health"); err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(body.String(), `"health":"true"`) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s not healthy after 30s:\n%s", s.Endpoint, s.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Output is what etcd printed so far.
func (s *Server) Output() string { return s.out.String() }

// Pid is the running etcd's pid (0 when stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to end.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if cmd, done := s.take(); cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// take forgets the running process and returns it, continued if it was
// stopped (nil when none runs).
func (s *Server) take() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	return cmd, done
}

// Restart starts a killed (or stopped) etcd again on the same data dir and
// ports and waits until it is healthy.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill(t)
	s.start(t, "existing")
}

// Signal sends sig (SIGSTOP, SIGCONT) to the running etcd.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("etcd is not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM, waits up to 10 s, then SIGKILL.
func (s *Server) Stop(t testing.TB) {
	cmd, done := s.take()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Logf("etcd ignored SIGTERM for 10s; killing it")
		_ = cmd.Process.Kill()
		<-done
	}
}
