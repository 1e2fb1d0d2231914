package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"

	"github.com/stockade-dev/stockade/actors/relay"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
)

// openRelay asks the gateway for a relay to a Ready sandbox and connects to
// it. Any failure to get a stream is exit code 5; a refusal (not Ready) is 4.
func (co *clientOpts) openRelay(cmd *cobra.Command, name string) (net.Conn, *messages.Reply, error) {
	c, err := co.dial(cmd)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	reply, err := c.Request(context.Background(), &messages.RelayRequest{Name: name})
	if err != nil {
		return nil, nil, &exitError{exitUnreachable, fmt.Errorf("open relay to %s: %w", name, err)}
	}
	if reply.Status != messages.Status_STATUS_OK {
		return nil, nil, &exitError{errdefs.ExitCode(errdefs.KindOfStatus(reply.Status)), errdefs.FromReply(reply)}
	}
	conn, err := c.DialRelay(reply.RelayAddr)
	if err != nil {
		return nil, nil, &exitError{exitUnreachable, err}
	}
	if err := relay.Open(conn, reply.RelayToken); err != nil {
		_ = conn.Close()
		return nil, nil, &exitError{exitUnreachable, err}
	}
	return conn, reply, nil
}

// sshClient speaks SSH over a relay stream. The stream is already
// authenticated by the gateway's one-time token; the host key is pinned to
// the one the sandbox's supervisor reported (none: refused).
// sshHandshakeWait bounds the SSH handshake over a relay: the relay pairs
// within relay.PairTimeout (10 s) or closes the connection, and a paired
// sandbox answers at once.
const sshHandshakeWait = 30 * time.Second

func sshClient(conn net.Conn, name string, reply *messages.Reply) (*ssh.Client, error) {
	if reply.HostKey == "" {
		return nil, &exitError{exitUnreachable, fmt.Errorf("sandbox %s: the gateway has no host key for it (its supervisor reported none); restart the sandbox", name)}
	}
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(reply.HostKey))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: bad host key from the gateway: %w", name, err)
	}
	// ClientConfig.Timeout bounds only a dial: the handshake over a relay
	// whose other side never comes (its supervisor died as the relay was
	// made) would wait for the sandbox's version line for ever.
	_ = conn.SetDeadline(time.Now().Add(sshHandshakeWait))
	cc, chans, reqs, err := ssh.NewClientConn(conn, name, &ssh.ClientConfig{User: "sandbox", HostKeyCallback: ssh.FixedHostKey(key), Timeout: 10 * time.Second})
	if err != nil {
		return nil, &exitError{exitUnreachable, fmt.Errorf("ssh to sandbox %s over the relay: %w (its supervisor may have restarted: try again)", name, err)}
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(cc, chans, reqs), nil
}

// shellQuote quotes argv for the remote /bin/sh -c.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// execCommand is the command line the sandbox's shell runs for argv: the
// shell exec's the program, so the program is the session's process (its
// exit status or signal is the session's, a signal reaches it, and no
// shell waits beside it in the sandbox for as long as it runs).
func execCommand(argv []string, workdir string) string {
	command := "exec " + shellQuote(argv)
	if workdir != "" {
		command = "cd " + shellQuote([]string{workdir}) + " && " + command
	}
	return command
}

func newExecCmd(co *clientOpts) *cobra.Command {
	var timeout time.Duration
	var workdir string
	var env []string
	var tty bool
	cmd := &cobra.Command{
		Use:   "exec NAME [--timeout D] [--workdir DIR] [--env K=V] [--tty] -- CMD ARGS...",
		Short: "Run a command in a Ready sandbox; exits with its status",
		Long: `Run a command in a Ready sandbox over an SSH relay through the gateway.
stdout and stderr stay separate; stdin is forwarded when it is not a
terminal; --tty allocates a terminal. The exit code is the command's; 5 when
no relay could be opened; 4 when the sandbox is not Ready.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			conn, reply, err := co.openRelay(cmd, name)
			if err != nil {
				return err
			}
			defer conn.Close()
			cl, err := sshClient(conn, name, reply)
			if err != nil {
				return err
			}
			defer cl.Close()
			sess, err := cl.NewSession()
			if err != nil {
				return &exitError{exitUnreachable, fmt.Errorf("sandbox %s: open session: %w", name, err)}
			}
			defer sess.Close()
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return &exitError{exitUsage, fmt.Errorf("--env %q: want K=V", kv)}
				}
				if err := sess.Setenv(k, v); err != nil {
					return &exitError{exitFailure, fmt.Errorf("--env %s refused by the sandbox: %w", k, err)}
				}
			}
			sess.Stdout, sess.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
			if !stdinTTY {
				sess.Stdin = os.Stdin
			}
			if tty {
				w, h := 80, 24
				if stdinTTY {
					if cw, ch, err := term.GetSize(int(os.Stdin.Fd())); err == nil {
						w, h = cw, ch
					}
					old, err := term.MakeRaw(int(os.Stdin.Fd()))
					if err == nil {
						defer term.Restore(int(os.Stdin.Fd()), old)
					}
					sess.Stdin = os.Stdin
				}
				if err := sess.RequestPty(envOr("TERM", "xterm"), h, w, ssh.TerminalModes{}); err != nil {
					return &exitError{exitFailure, fmt.Errorf("sandbox %s: pty: %w", name, err)}
				}
			}
			command := execCommand(argv, workdir)
			done := make(chan error, 1)
			go func() { done <- sess.Run(command) }()
			var timer <-chan time.Time
			if timeout > 0 {
				timer = time.After(timeout)
			}
			select {
			case err = <-done:
			case <-timer:
				_ = sess.Signal(ssh.SIGKILL)
				_ = sess.Close()
				return &exitError{exitFailure, fmt.Errorf("sandbox %s: %s did not finish within %s", name, argv[0], timeout)}
			}
			var ee *ssh.ExitError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ee):
				if ee.Signal() != "" {
					return &exitError{128 + signalNumber(ee.Signal()), fmt.Errorf("%s: killed by SIG%s", argv[0], ee.Signal())}
				}
				return &exitError{ee.ExitStatus(), nil}
			default:
				var missing *ssh.ExitMissingError
				if errors.As(err, &missing) {
					return &exitError{exitUnreachable, fmt.Errorf("sandbox %s: the stream ended before the exit status came back", name)}
				}
				// The transport ended (EOF, reset) before the command
				// could be run or report: the relay or the supervisor
				// went away.
				return &exitError{exitUnreachable, fmt.Errorf("sandbox %s: the connection to the sandbox ended before the exit status came back (%w); the supervisor may be restarting: retry", name, err)}
			}
		},
	}
	f := cmd.Flags()
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	f.StringVar(&workdir, "workdir", "", "working directory inside (default /sandbox)")
	f.StringArrayVar(&env, "env", nil, "set K=V in the command's environment (repeatable)")
	f.BoolVarP(&tty, "tty", "t", false, "allocate a terminal")
	return cmd
}

func signalNumber(name string) int {
	for i := 1; i < 32; i++ {
		if strings.EqualFold(strings.TrimPrefix(syscall.Signal(i).String(), "signal "), name) {
			return i
		}
	}
	switch name {
	case "KILL":
		return 9
	case "TERM":
		return 15
	case "INT":
		return 2
	case "HUP":
		return 1
	}
	return 1
}

// proxyStatusEnv names the file where `ssh-proxy`, run by `connect`'s ssh
// as its ProxyCommand, leaves why it could not open the relay (proxyStatus):
// ssh itself would only say "kex_exchange_identification: Connection
// closed" and exit 255.
const proxyStatusEnv = "STOCKADE_SSH_PROXY_STATUS"

// proxyStatus is that file's content: the exit code and the message.
type proxyStatus struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeProxyStatus leaves err for `connect` at path: complete before
// ssh-proxy exits and ssh notices (written aside, then linked), and never
// over an existing file (the link fails).
func writeProxyStatus(path string, err error) error {
	st := proxyStatus{Code: exitFailure, Message: err.Error()}
	var ee *exitError
	if errors.As(err, &ee) {
		st.Code = ee.code
	}
	b, jerr := json.Marshal(st)
	if jerr != nil {
		return jerr
	}
	tmp := path + ".tmp"
	f, oerr := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if oerr != nil {
		return oerr
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Link(tmp, path)
	}
	_ = os.Remove(tmp)
	return werr
}

// readProxyStatus reads what ssh-proxy left at path (ok false: nothing).
func readProxyStatus(path string) (proxyStatus, bool) {
	var st proxyStatus
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &st) != nil || st.Code == 0 {
		return st, false
	}
	return st, true
}

func newSSHProxyCmd(co *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-proxy NAME",
		Short: "Relay stdin/stdout to a sandbox's SSH server (for ssh's ProxyCommand)",
		Long: `Relay stdin/stdout to a sandbox's SSH server, for ssh's ProxyCommand
(see ssh-config). When no relay can be opened it exits 4 (the sandbox is not
in a phase that allows it), 3 (no such sandbox) or 5 (no gateway, or no
supervisor session).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, reply, err := co.openRelay(cmd, args[0])
			if err == nil {
				if path := os.Getenv(knownHostsEnv); path != "" {
					// Run by connect: pin the key vouched for with this
					// relay before ssh can see the server's.
					if err = co.pinForConnect(args[0], reply, path); err != nil {
						_ = conn.Close()
						err = &exitError{exitFailure, err}
					}
				}
			}
			if err != nil {
				if path := os.Getenv(proxyStatusEnv); path != "" {
					// Run by connect: it prints the message and exits
					// with the code; ssh would print its own.
					if werr := writeProxyStatus(path, err); werr == nil {
						var ee *exitError
						if errors.As(err, &ee) {
							return &exitError{ee.code, nil}
						}
						return &exitError{exitFailure, nil}
					}
				}
				return err
			}
			defer conn.Close()
			done := make(chan struct{}, 2)
			go func() {
				_, _ = io.Copy(conn, os.Stdin)
				if hc, ok := conn.(interface{ CloseWrite() error }); ok {
					_ = hc.CloseWrite()
				}
				done <- struct{}{}
			}()
			go func() { _, _ = io.Copy(os.Stdout, conn); done <- struct{}{} }()
			<-done
			return nil
		},
	}
}

// pinForConnect writes the known_hosts line of the key the gateway
// vouched for (reply) to connect's new file at path.
func (co *clientOpts) pinForConnect(name string, reply *messages.Reply, path string) error {
	alias, err := co.hostKeyAlias(name)
	if err != nil {
		return err
	}
	line, err := knownHostsLine(alias, reply.HostKey)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", name, err)
	}
	return writeNewKnownHosts(path, line)
}

// hostKeyAlias is sandbox name's HostKeyAlias under the client
// configuration (hostKeyAlias), once name is known to be a sandbox's.
func (co *clientOpts) hostKeyAlias(name string) (string, error) {
	if err := checkSandboxName(name); err != nil {
		return "", err
	}
	cfg, _, err := co.configuration()
	if err != nil {
		return "", &exitError{exitUnreachable, err}
	}
	return hostKeyAlias(name, cfg), nil
}

// sshOptions are the options of a Host block for NAME whose host key is
// pinned in the known_hosts file knownHosts under alias.
func (co *clientOpts) sshOptions(name, alias, knownHosts string) ([][2]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the stockade binary: %w", err)
	}
	state, err := filepath.Abs(co.stateDir)
	if err != nil {
		return nil, err
	}
	proxy := fmt.Sprintf("%s sandbox ssh-proxy %s --state-dir %s", self, name, state)
	if co.gateway != "" {
		proxy += " --gateway " + co.gateway
	}
	if co.config != "" {
		cfg, err := filepath.Abs(co.config)
		if err != nil {
			return nil, err
		}
		proxy += " --config " + cfg
	}
	return [][2]string{
		{"HostName", name},
		{"User", "sandbox"},
		{"ProxyCommand", proxy},
		// The relay stream is mutual TLS to the gateway plus its one-time
		// token; the host key is still checked against the one the gateway
		// vouches for, so nothing else on the relay's path can speak for
		// the sandbox.
		{"StrictHostKeyChecking", "yes"},
		{"UserKnownHostsFile", sshQuote(knownHosts)},
		{"HostKeyAlias", alias},
		{"LogLevel", "ERROR"},
	}, nil
}

func newSSHConfigCmd(co *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-config NAME",
		Short: "Print a Host block for ~/.ssh/config (then: ssh NAME, scp FILE NAME:)",
		Long: `Print a Host block for ~/.ssh/config (then: ssh NAME, scp FILE NAME:).
The sandbox must be Ready: its host key, as the gateway vouches for it and
the sandbox presents it, is pinned in ~/.config/stockade/known_hosts.d/
(0600), which the block names with StrictHostKeyChecking yes. A sandbox
created again under the name has a new key: run ssh-config again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			alias, err := co.hostKeyAlias(name)
			if err != nil {
				return err
			}
			path, err := userKnownHostsFile(alias)
			if err != nil {
				return &exitError{exitFailure, err}
			}
			line, err := co.vouchedHostKey(cmd, name, alias)
			if err != nil {
				return err
			}
			if err := pinHostKey(path, line); err != nil {
				return &exitError{exitFailure, err}
			}
			opts, err := co.sshOptions(name, alias, path)
			if err != nil {
				return &exitError{exitFailure, err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Host %s\n", args[0])
			for _, o := range opts {
				fmt.Fprintf(out, "  %s %s\n", o[0], o[1])
			}
			return nil
		},
	}
}

func newConnectCmd(co *clientOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "connect NAME",
		Short: "Open a shell in a sandbox with the system ssh",
		Long: `Open a shell in a sandbox with the system ssh, through the gateway's relay
(ssh runs 'stockade sandbox ssh-proxy NAME' as its ProxyCommand). The exit
code is the shell's; when no relay can be opened, the stockade message only
and 4 (the sandbox is not in a phase that allows it), 3 (no such sandbox) or
5 (no gateway, or no supervisor session); 255 when ssh itself fails.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sshBin, err := exec.LookPath("ssh")
			if err != nil {
				return &exitError{exitFailure, errors.New("ssh not found: install the OpenSSH client (Debian: openssh-client)")}
			}
			alias, err := co.hostKeyAlias(args[0])
			if err != nil {
				return err
			}
			return runSSH(sshBin, func(knownHosts string) ([]string, error) {
				opts, err := co.sshOptions(args[0], alias, knownHosts)
				if err != nil {
					return nil, &exitError{exitFailure, err}
				}
				var argv []string
				for _, o := range opts {
					argv = append(argv, "-o", o[0]+"="+o[1])
				}
				return append(argv, args[0]), nil
			})
		},
	}
}

// vouchedHostKey returns the known_hosts line (under alias) of sandbox
// name's host key as the gateway vouches for it, after an SSH handshake
// over a relay has shown that the sandbox presents that key.
func (co *clientOpts) vouchedHostKey(cmd *cobra.Command, name, alias string) ([]byte, error) {
	conn, reply, err := co.openRelay(cmd, name)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	line, err := knownHostsLine(alias, reply.HostKey)
	if err != nil {
		return nil, &exitError{exitUnreachable, fmt.Errorf("sandbox %s: %w", name, err)}
	}
	cl, err := sshClient(conn, name, reply)
	if err != nil {
		return nil, err
	}
	_ = cl.Close()
	return line, nil
}

// runSSH runs ssh as a child (not exec: its ProxyCommand's failure must
// become connect's exit code and message) with the arguments args returns
// for its known_hosts file, and exits as ssh does. ssh-proxy pins the host
// key the gateway vouches for in that private file (knownHostsEnv) and
// leaves why it failed in another (proxyStatusEnv); then ssh's own lines
// after it ("kex_exchange_identification: Connection closed") are dropped
// and the stockade message is printed instead.
func runSSH(sshBin string, args func(knownHosts string) ([]string, error)) error {
	dir, err := os.MkdirTemp("", "stockade-connect-")
	if err != nil {
		return &exitError{exitFailure, fmt.Errorf("connect: a private temp dir for ssh-proxy's status: %w (check TMPDIR)", err)}
	}
	defer os.RemoveAll(dir)
	status, knownHosts := filepath.Join(dir, "status"), filepath.Join(dir, "known_hosts")
	argv, err := args(knownHosts)
	if err != nil {
		return err
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return &exitError{exitFailure, fmt.Errorf("connect: pipe for ssh's stderr: %w", err)}
	}
	c := exec.Command(sshBin, argv...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, wr
	c.Env = append(os.Environ(), proxyStatusEnv+"="+status, knownHostsEnv+"="+knownHosts)
	// The terminal's signals reach ssh (same process group); this process
	// waits for it. SIGTERM and SIGHUP sent to this process are passed on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := c.Start(); err != nil {
		_, _ = rd.Close(), wr.Close()
		return &exitError{exitFailure, fmt.Errorf("connect: start ssh: %w", err)}
	}
	_ = wr.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		filterSSHStderr(rd, os.Stderr, status)
		_ = rd.Close()
	}()
	type waited struct {
		ws  syscall.WaitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() { ws, err := waitFollowingStops(c.Process.Pid); done <- waited{ws, err} }()
	var w waited
wait:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM || sig == syscall.SIGHUP {
				_ = c.Process.Signal(sig)
			}
		case w = <-done:
			break wait
		}
	}
	_ = c.Process.Release()
	select { // ssh-proxy may outlive ssh for a moment and hold the pipe
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	if st, ok := readProxyStatus(status); ok {
		return &exitError{st.Code, errors.New(st.Message)}
	}
	ws := w.ws
	switch {
	case w.err != nil:
		return &exitError{exitFailure, fmt.Errorf("connect: wait for ssh: %w", w.err)}
	case ws.Exited():
		if ws.ExitStatus() == 0 {
			return nil
		}
		return &exitError{ws.ExitStatus(), nil}
	case ws.Signaled():
		return &exitError{128 + int(ws.Signal()), nil}
	default:
		return &exitError{exitFailure, fmt.Errorf("connect: ssh ended with wait status %#x", uint32(ws))}
	}
}

// filterSSHStderr copies ssh's stderr to out until ssh-proxy has left a
// status at path: after that, ssh only reports that the proxy went away.
// ssh-proxy writes the status before it exits, so before ssh notices.
func filterSSHStderr(r io.Reader, out io.Writer, path string) {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, failed := readProxyStatus(path); !failed {
				_, _ = out.Write(buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// waitFollowingStops waits for ssh to end. When ssh stops itself (its
// ~^Z escape), this process stops too, so the shell sees the job stop;
// its SIGCONT (fg) goes to the whole process group, ssh included.
func waitFollowingStops(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case err != nil:
			return ws, err
		case ws.Stopped():
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		default:
			return ws, nil
		}
	}
}
