// Package etcdtest starts a real etcd server (Debian's etcd-server) for
// tests, on free ports of 127.0.0.1 with a temporary data dir, and lets a
// test kill, restart and pause it. Outside CI a missing etcd skips the
// test; in CI it fails (testenv.NeedTool). It is the tests' thin wrapper of
// internal/etcdproc, which runs the process.
package etcdtest

import (
	"context"
	"syscall"
	"testing"

	"github.com/stockade-dev/stockade/internal/etcdproc"
	"github.com/stockade-dev/stockade/internal/testenv"
)

// Server is a real etcd, one member, on 127.0.0.1.
type Server struct {
	// Endpoint is the client URL (http://127.0.0.1:PORT; https:// from
	// StartTLS).
	Endpoint string
	// TLS is set by StartTLS: the files and a client configuration.
	TLS *TLSFiles

	proc *etcdproc.Server
}

// FreePort returns a port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ports, err := etcdproc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// Start starts etcd and waits until it is healthy; the test's cleanup
// stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

// start starts etcd, serving its clients over TLS with files when they
// are set, and keeps its output in memory.
func start(t testing.TB, files *TLSFiles) *Server {
	t.Helper()
	c := etcdproc.Config{
		Bin:     testenv.NeedTool(t, "etcd", "etcd-server"),
		Name:    "test",
		DataDir: t.TempDir(),
		Output:  &testenv.Buffer{},
	}
	if files != nil {
		c.TLS = &etcdproc.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey, CAFile: files.CA, Client: files.Client(t)}
	}
	p, err := etcdproc.Start(context.Background(), c)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := &Server{Endpoint: p.ClientURL(), TLS: files, proc: p}
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// Output is what etcd printed so far.
func (s *Server) Output() string { return s.proc.Output() }

// Pid is the running etcd's pid (0 when stopped).
func (s *Server) Pid() int { return s.proc.Pid() }

// Kill sends SIGKILL and waits for the process to end.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.proc.Kill(); err != nil {
		t.Fatalf("%v", err)
	}
}

// Restart starts a killed (or stopped) etcd again on the same data dir and
// ports and waits until it is healthy.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.proc.Restart(context.Background()); err != nil {
		t.Fatalf("%v", err)
	}
}

// Signal sends sig (SIGSTOP, SIGCONT) to the running etcd.
func (s *Server) Signal(sig syscall.Signal) error { return s.proc.Signal(sig) }

// Stop sends SIGTERM, waits up to 10 s, then SIGKILL.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.proc.Stop(); err != nil {
		t.Logf("%v", err)
	}
}
