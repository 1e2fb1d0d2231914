package sshd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"
)

// maxEnv bounds the variables a client may send per session.
const maxEnv = 256

// Request payloads (RFC 4254 section 6).
type (
	ptyReq struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}
	winReq    struct{ Cols, Rows, Width, Height uint32 }
	envReq    struct{ Name, Value string }
	execReq   struct{ Command string }
	nameReq   struct{ Name string } // subsystem, signal
	exitCode  struct{ Status uint32 }
	exitBySig struct {
		Signal     string
		CoreDumped bool
		Error      string
		Lang       string
	}
)

// session is one session channel: its requests are handled in order by
// serveSession's goroutine; once a process is started, run streams it.
type session struct {
	srv *Server
	log zerolog.Logger
	ch  ssh.Channel

	env        []string // from "env" requests
	term       string
	ptyM, ptyS *os.File

	kind, command string
	begin         time.Time
	proc          Proc
	code          int
	signal        string
	waitErr       error
	exited        chan struct{} // closed when proc.Wait returned
	exitedFlag    atomic.Bool
	done          chan struct{} // closed when run returned
	io            sync.WaitGroup
}

func (s *Server) serveSession(ctx context.Context, log zerolog.Logger, ch ssh.Channel, reqs <-chan *ssh.Request) {
	s.sessions.Add(1)
	s.activeSessions.Add(1)
	defer s.activeSessions.Add(-1)
	ss := &session{srv: s, log: log, ch: ch}
	defer ss.finish(reqs)
	defer func() {
		if r := recover(); r != nil {
			s.panicked(ss.log, "session", r)
		}
	}()
	for req := range reqs {
		err := ss.handle(ctx, req)
		if err != nil {
			ss.log.Debug().Err(err).Str("request", req.Type).Msg("request refused")
		}
		if req.WantReply {
			_ = req.Reply(err == nil, nil)
		}
	}
}

var errUnsupported = errors.New("unsupported request")

func (ss *session) handle(ctx context.Context, req *ssh.Request) error {
	switch req.Type {
	case "env":
		var m envReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		if ss.proc != nil || len(ss.env) >= maxEnv || m.Name == "" ||
			strings.ContainsAny(m.Name, "=\x00") || strings.ContainsRune(m.Value, 0) {
			return fmt.Errorf("env %q refused", m.Name)
		}
		ss.env = append(ss.env, m.Name+"="+m.Value)
		return nil
	case "pty-req":
		var m ptyReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		if ss.ptyM != nil || ss.proc != nil {
			return errors.New("pty already allocated or process started")
		}
		master, slave, err := openPty()
		if err != nil {
			return err
		}
		ss.ptyM, ss.ptyS, ss.term = master, slave, m.Term
		return setWinsize(master, m.Cols, m.Rows, m.Width, m.Height)
	case "window-change":
		var m winReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		if ss.ptyM == nil {
			return errors.New("no pty")
		}
		return setWinsize(ss.ptyM, m.Cols, m.Rows, m.Width, m.Height)
	case "exec":
		var m execReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		return ss.start(ctx, req, "exec", m.Command, []string{ss.srv.cfg.Shell, "-c", m.Command})
	case "shell":
		return ss.start(ctx, req, "shell", "", []string{ss.srv.cfg.Shell, "-l"})
	case "subsystem":
		var m nameReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		if m.Name != "sftp" {
			return fmt.Errorf("subsystem %q: only sftp is served", m.Name)
		}
		path := ss.srv.cfg.SFTPServer
		if _, err := os.Stat(path); err != nil {
			err = fmt.Errorf("sftp subsystem unavailable: %w (install openssh-sftp-server; scp -O still works)", err)
			_, _ = fmt.Fprintf(ss.ch.Stderr(), "stockade: %v\r\n", err)
			return err
		}
		return ss.start(ctx, req, "subsystem", "sftp", []string{path})
	case "signal":
		var m nameReq
		if err := ssh.Unmarshal(req.Payload, &m); err != nil {
			return err
		}
		sig := ParseSignal(m.Name)
		if ss.proc == nil || sig == 0 {
			return fmt.Errorf("signal %q: no process or unknown signal", m.Name)
		}
		return ss.proc.Signal(sig)
	}
	return errUnsupported
}

// environ is the process environment: the server's base, then the client's
// variables, then TERM for a pty; a later name replaces an earlier one.
func (ss *session) environ() []string {
	env := append(append([]string{}, ss.srv.cfg.Env...), ss.env...)
	if ss.ptyS != nil && ss.term != "" {
		env = append(env, "TERM="+ss.term)
	}
	out := make([]string, 0, len(env))
	at := map[string]int{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := at[name]; ok {
			out[i] = kv
			continue
		}
		at[name] = len(out)
		out = append(out, kv)
	}
	return out
}

func lookupEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// start spawns argv on a pty (when one was requested and this is not a
// subsystem) or on three pipes, replies to req, and starts streaming.
func (ss *session) start(ctx context.Context, req *ssh.Request, kind, command string, argv []string) error {
	if ss.proc != nil {
		return errors.New("a process was already started on this channel")
	}
	sr := SpawnRequest{Argv: argv, Env: ss.environ(), Workdir: ss.srv.cfg.Workdir, Setsid: true}
	var child, mine []*os.File // child's ends (closed after spawn); ours
	var stdin, stdout, stderr *os.File
	if ss.ptyM != nil && kind != "subsystem" {
		sr.Stdin, sr.Stdout, sr.Stderr, sr.Setctty = ss.ptyS, ss.ptyS, ss.ptyS, true
		child, ss.ptyS = []*os.File{ss.ptyS}, nil
		stdin, stdout = ss.ptyM, ss.ptyM // ss.ptyM stays for window changes
		mine = []*os.File{stdin}
	} else {
		var p [3][2]*os.File // stdin, stdout, stderr: read end, write end
		for i := range p {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll(child...)
				closeAll(mine...)
				return fmt.Errorf("sshd: pipe: %w", err)
			}
			p[i] = [2]*os.File{r, w}
			if i == 0 {
				child, mine = append(child, r), append(mine, w)
			} else {
				child, mine = append(child, w), append(mine, r)
			}
		}
		sr.Stdin, sr.Stdout, sr.Stderr = p[0][0], p[1][1], p[2][1]
		stdin, stdout, stderr = p[0][1], p[1][0], p[2][0]
	}
	proc, err := ss.srv.cfg.Spawner.Spawn(ctx, sr)
	closeAll(child...)
	if err != nil {
		closeAll(mine...)
		_, _ = fmt.Fprintf(ss.ch.Stderr(), "stockade: cannot start %s: %v\r\n", kind, err)
		return err
	}
	ss.proc, ss.kind, ss.command, ss.begin = proc, kind, command, time.Now()
	ss.exited, ss.done = make(chan struct{}), make(chan struct{})
	go func() {
		ss.code, ss.signal, ss.waitErr = proc.Wait()
		ss.exitedFlag.Store(true)
		close(ss.exited)
	}()
	// Reply before any output so the client sees success first.
	if req.WantReply {
		_ = req.Reply(true, nil)
		req.WantReply = false
	}
	go ss.run(stdin, stdout, stderr)
	return nil
}

// run streams a started process: client data to stdin (closed on the
// client's EOF, except on a pty), stdout and stderr to the channel; after
// the exit it drains the output, sends EOF, the exit status, and closes.
func (ss *session) run(stdin, stdout, stderr *os.File) {
	defer close(ss.done)
	defer func() {
		if r := recover(); r != nil {
			ss.srv.panicked(ss.log, "session stream", r)
			_ = ss.proc.Signal(syscall.SIGKILL)
			_ = ss.ch.Close()
		}
	}()
	var out sync.WaitGroup
	outs := []*os.File{stdout}
	ss.pump(&out, stdout, ss.ch)
	if stderr != nil {
		outs = append(outs, stderr)
		ss.pump(&out, stderr, ss.ch.Stderr())
	}
	ss.io.Add(1)
	go func() {
		defer ss.io.Done()
		_, _ = io.Copy(stdin, ss.ch)
		if stdin != stdout { // a pipe: half-close; a pty master stays open
			_ = stdin.Close()
		}
	}()

	<-ss.exited
	for _, f := range outs {
		_ = f.SetReadDeadline(time.Now().Add(ss.srv.cfg.DrainTimeout))
	}
	out.Wait()
	_ = stdin.Close() // unblocks a copy into a process that stopped reading

	ev := ss.log.Info()
	if ss.waitErr != nil {
		_, _ = fmt.Fprintf(ss.ch.Stderr(), "stockade: %v\r\n", ss.waitErr)
		ev = ss.log.Warn().Err(ss.waitErr)
	}
	_ = ss.ch.CloseWrite()
	switch {
	case ss.waitErr != nil: // no status to report: the client sees none
	case ss.signal != "":
		_, _ = ss.ch.SendRequest("exit-signal", false, ssh.Marshal(exitBySig{Signal: ss.signal}))
		ev = ev.Str("signal", ss.signal)
	default:
		_, _ = ss.ch.SendRequest("exit-status", false, ssh.Marshal(exitCode{Status: uint32(ss.code)}))
		ev = ev.Int("status", ss.code)
	}
	_ = ss.ch.Close()
	ev.Str("kind", ss.kind).Str("command", ss.command).Bool("pty", stderr == nil).
		Dur("duration", time.Since(ss.begin)).Msg("session ended")
}

// pump copies r to w until EOF, an error (EIO on a pty whose slave is
// gone), or, once the process has exited, DrainTimeout without data. It
// closes r, so a writer whose client went away gets EPIPE. wg (run's) and
// ss.io (finish's) both wait for it.
func (ss *session) pump(wg *sync.WaitGroup, r *os.File, w io.Writer) {
	wg.Add(1)
	ss.io.Add(1)
	go func() {
		defer ss.io.Done()
		defer wg.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			if ss.exitedFlag.Load() {
				_ = r.SetReadDeadline(time.Now().Add(ss.srv.cfg.DrainTimeout))
			}
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// finish runs when the request loop ended: normally after run closed the
// channel; early when the client went away or a panic cut the loop short.
// A process still running is hung up: SIGHUP to its group, SIGKILL after
// HangupGrace. finish returns when everything of the session has ended.
func (ss *session) finish(reqs <-chan *ssh.Request) {
	if ss.proc != nil {
		select {
		case <-ss.exited:
		default:
			ss.hangup()
		}
	}
	_ = ss.ch.Close()
	ssh.DiscardRequests(reqs) // returns once the client acknowledged the close
	if ss.proc != nil {
		<-ss.exited
		<-ss.done
	}
	ss.io.Wait()
	closeAll(ss.ptyM, ss.ptyS) // (again) or a pty that never got a process
}

func (ss *session) hangup() {
	ss.log.Info().Str("kind", ss.kind).Str("command", ss.command).Msg("client gone: hanging up the process")
	_ = ss.proc.Signal(syscall.SIGHUP)
	t := time.NewTimer(ss.srv.cfg.HangupGrace)
	defer t.Stop()
	select {
	case <-ss.exited:
	case <-t.C:
		_ = ss.proc.Signal(syscall.SIGKILL)
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			_ = f.Close()
		}
	}
}
