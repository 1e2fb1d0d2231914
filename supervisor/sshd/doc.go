// Package sshd owns the SSH server a supervisor runs for its sandbox: the
// target of `stockade sandbox exec|connect|ssh-proxy` and of plain OpenSSH
// (`ssh`, `scp`) through the gateway's relay.
//
// It speaks SSH (golang.org/x/crypto/ssh) on connections handed to it
// (ServeConn; the supervisor gets each one from a relay dial-back), never on
// a port of its own; Serve(listener) exists for tests. It implements session
// channels the way OpenSSH's sshd does: exec (`$SHELL -c CMD`), shell
// (`$SHELL -l`), pty-req / window-change (a /dev/ptmx pair opened with
// golang.org/x/sys/unix), env, signal, exit-status / exit-signal, stdin
// half-close, and the sftp subsystem by spawning OpenSSH's sftp-server.
// All output is delivered and EOF sent before exit-status, then the channel
// is closed, so clients print everything and exit with the remote status.
//
// It starts no process itself: every command, shell and sftp-server goes
// through a Spawner, which the supervisor implements by running the process
// inside the sandbox's namespaces and Landlock domain. HostSpawner runs
// processes on the host and is NOT confinement (tests, fallback only).
// Port forwarding, agent and X11 forwarding are refused: they would open
// connections from the supervisor's side of the boundary.
//
// Authentication: the relay has already authenticated the stream (one-time
// token, gateway client token), so by default the server accepts SSH "none"
// authentication for any user name; Config.Authorize can narrow that. The
// host key is an ed25519 key kept in a file (created 0600 if missing) so
// clients see the same key across supervisor restarts.
//
// A panic in one channel ends that channel (its process is killed), a panic
// in a connection's own loop ends that connection; both are logged and
// counted in Stats, and no other connection notices.
package sshd
