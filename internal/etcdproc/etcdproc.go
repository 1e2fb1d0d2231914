package etcdproc

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is an etcd member to run.
type Config struct {
	// Bin is the etcd program (required).
	Bin string
	// Name is the member's name (default "etcd").
	Name string
	// DataDir is the member's data directory (required); Restart reuses
	// it.
	DataDir string
	// TLS, when set, makes etcd serve its clients over https and require
	// client certificates; nil: plain http.
	TLS *TLS
	// LogPath is a file that receives etcd's output (stdout and stderr),
	// appended across starts; etcd writes to it directly.
	LogPath string
	// Output receives etcd's output when LogPath is empty. One of the two
	// is required.
	Output Sink
	// RetryInUse is how long to keep retrying a start that failed because
	// a port was in use (etcd's output says so): a restart on a port that
	// another process's outgoing connection holds for a moment. 0: no
	// retry.
	RetryInUse time.Duration
}

// TLS is etcd's client TLS: the server's files and what the health check
// presents.
type TLS struct {
	// CertFile and KeyFile are the server's certificate (valid for
	// 127.0.0.1) and key.
	CertFile, KeyFile string
	// CAFile is the CA whose client certificates etcd accepts
	// (--client-cert-auth).
	CAFile string
	// Client is the health check's configuration: it trusts the server's
	// certificate and presents a client certificate etcd accepts.
	Client *tls.Config
}

// Sink keeps etcd's output in memory: a writer safe for concurrent use
// whose String is everything written to it (testenv.Buffer is one).
type Sink interface {
	io.Writer
	String() string
}

const (
	// healthTimeout bounds the wait for /health after a start.
	healthTimeout = 30 * time.Second
	// killWait bounds the wait for the process to end after SIGKILL.
	killWait = 10 * time.Second
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 10 * time.Second
	// tailLines is how much of etcd's output a failed start's error carries.
	tailLines = 20
)

// Server is an etcd member, one of its own, on 127.0.0.1. Its methods are
// safe for concurrent use.
type Server struct {
	cfg          Config
	client, peer string // URLs

	mu sync.Mutex
	p  *proc // nil when none runs
}

// proc is one start's process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result; set before done is closed
}

// Start picks two free ports of 127.0.0.1 (client and peer), starts etcd
// on them as a new cluster and waits up to 30 s until it is healthy. It
// fails when etcd exits first, is not healthy in time or ctx ends; no etcd
// is left running then.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.Bin == "" || c.DataDir == "" || (c.LogPath == "" && c.Output == nil) {
		return nil, errors.New("etcdproc: the Config needs Bin, DataDir, and LogPath or Output")
	}
	if c.Name == "" {
		c.Name = "etcd"
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	s := &Server{
		cfg:    c,
		client: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0]),
		peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
	if err := s.start(ctx, "new"); err != nil {
		return nil, err
	}
	return s, nil
}

// FreePorts returns n distinct ports of 127.0.0.1 that were free a moment
// ago.
func FreePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdproc: free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// ClientURL is etcd's client URL: http://127.0.0.1:PORT, or https://
// with TLS.
func (s *Server) ClientURL() string { return s.client }

// start starts etcd (state "new", or "existing" on its data dir) and waits
// until it is healthy, retrying for RetryInUse a start whose port was
// taken.
func (s *Server) start(ctx context.Context, state string) error {
	retryUntil := time.Now().Add(s.cfg.RetryInUse)
	for {
		err := s.startOnce(ctx, state)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(retryUntil) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcdproc: start etcd: %w (retrying: %w)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *Server) startOnce(ctx context.Context, state string) error {
	out, from, closeOut, err := s.output()
	if err != nil {
		return err
	}
	defer closeOut() // etcd has its own copy of a log file
	var args []string
	if t := s.cfg.TLS; t != nil {
		args = []string{"--cert-file", t.CertFile, "--key-file", t.KeyFile, "--trusted-ca-file", t.CAFile, "--client-cert-auth"}
	}
	cmd := exec.Command(s.cfg.Bin, append(args,
		"--name", s.cfg.Name,
		"--data-dir", s.cfg.DataDir,
		"--listen-client-urls", s.client,
		"--advertise-client-urls", s.client,
		"--listen-peer-urls", s.peer,
		"--initial-advertise-peer-urls", s.peer,
		"--initial-cluster", s.cfg.Name+"="+s.peer,
		"--initial-cluster-state", state,
		"--logger", "zap", "--log-level", "warn",
	)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdproc: start %s: %w", s.cfg.Bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.p = p
	s.mu.Unlock()
	if err := s.waitHealthy(ctx, p); err != nil {
		if kerr := s.Kill(); kerr != nil {
			err = fmt.Errorf("%w; %w", err, kerr)
		}
		tail := s.outputSince(from)
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %w", syscall.EADDRINUSE, err)
		}
		where := "etcd's output"
		if s.cfg.LogPath != "" {
			where = "etcd's log " + s.cfg.LogPath
		}
		return fmt.Errorf("%w; %s ends:\n%s", err, where, lastLines(tail, tailLines))
	}
	return nil
}

// waitHealthy polls etcd's /health (with the TLS client configuration)
// until it says healthy, p exits, ctx ends or 30 s pass.
func (s *Server) waitHealthy(ctx context.Context, p *proc) error {
	deadline := time.Now().Add(healthTimeout)
	tr := &http.Transport{}
	if s.cfg.TLS != nil {
		tr.TLSClientConfig = s.cfg.TLS.Client
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: time.Second}
	var last error
	for {
		select {
		case <-p.done:
			cause := p.err
			if cause == nil {
				cause = errors.New("exit status 0")
			}
			return fmt.Errorf("etcdproc: etcd exited before it was healthy: %w", cause)
		case <-ctx.Done():
			return fmt.Errorf("etcdproc: waiting for etcd at %s to be healthy: %w", s.client, ctx.Err())
		default:
		}
		if last = s.checkHealth(ctx, hc); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdproc: etcd at %s not healthy after %s: %w", s.client, healthTimeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkHealth asks /health once; nil: healthy.
func (s *Server) checkHealth(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.client+"/health", nil)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("health check: read the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `"health":"true"`) {
		return fmt.Errorf("health check: %s: %s", resp.Status, strings.TrimSpace(body.String()))
	}
	return nil
}

// output returns the writer for one start's output, how much output there
// was before it and what closes the writer once etcd has its copy.
func (s *Server) output() (io.Writer, int64, func(), error) {
	if s.cfg.LogPath == "" {
		return s.cfg.Output, int64(len(s.cfg.Output.String())), func() {}, nil
	}
	f, err := os.OpenFile(s.cfg.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("etcdproc: etcd's log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, nil, fmt.Errorf("etcdproc: etcd's log: %w", err)
	}
	return f, st.Size(), func() { _ = f.Close() }, nil
}

// Output is what etcd printed so far, in all its starts (the log file's
// content when the Config names one).
func (s *Server) Output() string { return s.outputSince(0) }

// outputSince is etcd's output after its first from bytes.
func (s *Server) outputSince(from int64) string {
	out, err := s.readOutput()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return out[min(from, int64(len(out))):]
}

// readOutput is all of etcd's output: the Sink's, or the log file's.
func (s *Server) readOutput() (string, error) {
	if s.cfg.LogPath == "" {
		return s.cfg.Output.String(), nil
	}
	b, err := os.ReadFile(s.cfg.LogPath)
	if err != nil {
		return "", fmt.Errorf("etcdproc: etcd's log: %w", err)
	}
	return string(b), nil
}

// lastLines is the last n lines of s ("(no output)" when there are none).
func lastLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "(no output)"
	}
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Pid is the running etcd's pid (0 when none runs).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// Signal sends sig (SIGSTOP, SIGCONT) to the running etcd.
func (s *Server) Signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return fmt.Errorf("etcdproc: signal %v: etcd is not running", sig)
	}
	if err := s.p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("etcdproc: signal %v to etcd: %w", sig, err)
	}
	return nil
}

// take forgets the running process and returns it, continued in case it
// was stopped (nil when none runs).
func (s *Server) take() *proc {
	s.mu.Lock()
	p := s.p
	s.p = nil
	s.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	return p
}

// Kill SIGKILLs etcd and waits (10 s at most) until it is gone; it does
// nothing when none runs. Restart starts it again.
func (s *Server) Kill() error {
	p := s.take()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("etcdproc: etcd (pid %d) still runs %s after SIGKILL (stuck in the kernel?)", p.cmd.Process.Pid, killWait)
	}
}

// Restart kills etcd if it runs, starts it again on the same data dir and
// ports ("existing" cluster state) and waits until it is healthy, as
// Start does.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.start(ctx, "existing")
}

// Stop sends SIGTERM, waits up to 10 s, then SIGKILLs and waits until etcd
// is gone; it does nothing when none runs. The error says etcd had to be
// killed.
func (s *Server) Stop() error {
	p := s.take()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("etcdproc: etcd (pid %d) ignored SIGTERM for %s; killed it", p.cmd.Process.Pid, stopGrace)
	}
}
