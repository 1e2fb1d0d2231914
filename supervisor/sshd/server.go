package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"
)

// Defaults for Config's zero values.
const (
	DefaultShell            = "/bin/sh"
	DefaultSFTPServer       = "/usr/lib/openssh/sftp-server"
	DefaultPath             = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	DefaultDrainTimeout     = 2 * time.Second
	DefaultHangupGrace      = 2 * time.Second
	DefaultHandshakeTimeout = 15 * time.Second
)

// ErrServerClosed is returned by Serve and ServeConn after Close.
var ErrServerClosed = errors.New("sshd: server closed")

// Config configures a Server. HostKeyPath and Spawner are required.
type Config struct {
	// HostKeyPath is the ed25519 host key file, created (0600) if missing.
	HostKeyPath string
	// Spawner starts every session process (commands, shells, sftp-server).
	Spawner Spawner
	// Authorize, when set, decides whether a connection (user name, remote
	// address) is let in. When nil every connection is accepted with SSH
	// "none" authentication: the relay in front of the server has already
	// authenticated the stream, and the server is never on a port of its own.
	Authorize func(conn ssh.ConnMetadata) bool
	// Env is the base environment of session processes (the sandbox's:
	// PATH, HOME, HTTP_PROXY, ...); nil means just DefaultPath. Variables the
	// client sends ("env" requests: ssh SendEnv/SetEnv, `exec --env`) are
	// all accepted when well-formed (a name without '=' or NUL, at most
	// maxEnv per session) and override it: they cannot widen what the
	// sandbox confines, they only shape the client's own process. A pty
	// sets TERM.
	Env []string
	// Workdir is the sessions' working directory ("" = the spawner's).
	Workdir string
	// Shell runs commands (`Shell -c CMD`) and login shells (`Shell -l`);
	// "" means $SHELL from Env, else DefaultShell.
	Shell string
	// SFTPServer is the sftp-server program started for the "sftp"
	// subsystem; "" means DefaultSFTPServer. When it is missing the
	// subsystem is refused with a message on stderr.
	SFTPServer string
	// DrainTimeout bounds how long output is still read after the process
	// exited, when something else (a background child) keeps it open.
	DrainTimeout time.Duration
	// HangupGrace is how long a process whose client went away has, after
	// SIGHUP to its process group, before SIGKILL.
	HangupGrace time.Duration
	// HandshakeTimeout bounds the SSH handshake and authentication.
	HandshakeTimeout time.Duration
	// Logger receives one line per connection and per session (zero: none).
	Logger zerolog.Logger
}

// Stats are the server's counters since New.
type Stats struct {
	Connections       int64 // connections served
	ActiveConnections int64
	HandshakeFailures int64
	Sessions          int64 // session channels opened
	ActiveSessions    int64
	Panics            int64 // recovered panics (each ended one channel or connection)
}

// Server is an SSH server for one sandbox. It is safe for concurrent use.
type Server struct {
	cfg    Config
	conf   *ssh.ServerConfig
	signer ssh.Signer
	log    zerolog.Logger

	mu      sync.Mutex
	closed  bool
	closers map[io.Closer]struct{} // live connections and Serve's listeners
	wg      sync.WaitGroup         // ServeConn calls

	nextID                                               atomic.Uint64
	conns, activeConns, handshakeFails, sessions, panics atomic.Int64
	activeSessions                                       atomic.Int64
}

// New loads or creates the host key and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Spawner == nil {
		return nil, errors.New("sshd: Config.Spawner is required")
	}
	if cfg.HostKeyPath == "" {
		return nil, errors.New("sshd: Config.HostKeyPath is required")
	}
	signer, err := LoadOrCreateHostKey(cfg.HostKeyPath)
	if err != nil {
		return nil, err
	}
	if cfg.Env == nil {
		cfg.Env = []string{DefaultPath}
	}
	if cfg.Shell == "" {
		cfg.Shell = lookupEnv(cfg.Env, "SHELL")
	}
	if cfg.Shell == "" {
		cfg.Shell = DefaultShell
	}
	if cfg.SFTPServer == "" {
		cfg.SFTPServer = DefaultSFTPServer
	}
	cfg.DrainTimeout = orDefault(cfg.DrainTimeout, DefaultDrainTimeout)
	cfg.HangupGrace = orDefault(cfg.HangupGrace, DefaultHangupGrace)
	cfg.HandshakeTimeout = orDefault(cfg.HandshakeTimeout, DefaultHandshakeTimeout)

	conf := &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-stockade"}
	if cfg.Authorize != nil {
		conf.NoClientAuthCallback = func(m ssh.ConnMetadata) (*ssh.Permissions, error) {
			if !cfg.Authorize(m) {
				return nil, fmt.Errorf("sshd: user %q from %s not authorized", m.User(), m.RemoteAddr())
			}
			return nil, nil
		}
	}
	conf.AddHostKey(signer)
	return &Server{
		cfg: cfg, conf: conf, signer: signer, log: cfg.Logger.With().Str("component", "sshd").Logger(),
		closers: map[io.Closer]struct{}{},
	}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// HostKey returns the server's public host key (for known_hosts lines).
func (s *Server) HostKey() ssh.PublicKey { return s.signer.PublicKey() }

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	return Stats{
		Connections: s.conns.Load(), ActiveConnections: s.activeConns.Load(),
		HandshakeFailures: s.handshakeFails.Load(), Sessions: s.sessions.Load(),
		ActiveSessions: s.activeSessions.Load(), Panics: s.panics.Load(),
	}
}

// track registers c for Close, and a ServeConn call for Close to wait for
// when wait is set; false once the server is closed.
func (s *Server) track(c io.Closer, wait bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closers[c] = struct{}{}
	if wait {
		s.wg.Add(1)
	}
	return true
}

func (s *Server) untrack(c io.Closer) {
	s.mu.Lock()
	delete(s.closers, c)
	s.mu.Unlock()
}

// Close closes every connection and every listener given to Serve, and
// waits until all sessions have ended (their processes hung up).
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.closers {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Serve serves every connection ln accepts, until ln fails or Close.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln, false) {
		return ErrServerClosed
	}
	defer s.untrack(ln)
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			return fmt.Errorf("sshd: accept: %w", err)
		}
		go func() { _ = s.ServeConn(context.Background(), c) }() // logs its end
	}
}

// ServeConn serves one SSH connection on c until the client disconnects,
// ctx is done or Close; it closes c and returns once every session of the
// connection has ended. The error says why the connection failed (nil for
// an orderly end).
func (s *Server) ServeConn(ctx context.Context, c net.Conn) (err error) {
	if !s.track(c, true) {
		c.Close()
		return ErrServerClosed
	}
	defer s.wg.Done()
	defer s.untrack(c)
	id := s.nextID.Add(1)
	log := s.log.With().Uint64("conn", id).Str("remote", c.RemoteAddr().String()).Logger()
	defer func() { log.Debug().AnErr("error", err).Msg("ssh connection ended") }()
	s.conns.Add(1)
	s.activeConns.Add(1)
	defer s.activeConns.Add(-1)

	var sessions sync.WaitGroup
	defer sessions.Wait() // runs last: after c is closed, sessions end
	defer c.Close()
	defer func() {
		if r := recover(); r != nil {
			s.panicked(log, "connection", r)
			err = fmt.Errorf("sshd: connection %d: panic: %v", id, r)
		}
	}()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, s.conf)
	if err != nil {
		s.handshakeFails.Add(1)
		return fmt.Errorf("sshd: handshake with %s: %w", c.RemoteAddr(), err)
	}
	_ = c.SetDeadline(time.Time{})
	log = log.With().Str("user", sc.User()).Logger()
	log.Debug().Str("client", string(sc.ClientVersion())).Msg("ssh connection")
	go ssh.DiscardRequests(reqs) // keepalives answered "no"; tcpip-forward refused

	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.Prohibited, "stockade: only session channels; forwarding would bypass the sandbox boundary")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			log.Debug().Err(err).Msg("accept channel")
			continue
		}
		sessions.Add(1)
		go func() {
			defer sessions.Done()
			s.serveSession(ctx, log, ch, creqs)
		}()
	}
	return nil
}

// panicked logs and counts a recovered panic.
func (s *Server) panicked(log zerolog.Logger, where string, r any) {
	s.panics.Add(1)
	log.Error().Str("where", where).Interface("panic", r).Bytes("stack", debug.Stack()).Msg("recovered panic")
}
