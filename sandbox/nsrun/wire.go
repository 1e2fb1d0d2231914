package nsrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The stages talk over SOCK_SEQPACKET socketpairs: one JSON message per
// packet, descriptors as SCM_RIGHTS, end of file when the peer closes.

// msgKind names a message between stages.
type msgKind int

const (
	// msgConfig: parent -> init and init -> exec; carries the stageConfig
	// (and, from a root parent, the workspace mount tree fd).
	msgConfig msgKind = 1
	// msgStarted: init -> parent; the workload runs. Carries its pid in the
	// sandbox, the warnings, the Landlock ABI and the boundary's descriptors
	// (fdIndex order, without the proxy's when the config's ParentProxy).
	msgStarted msgKind = 2
	// msgReady: exec -> init, just before execve; warnings and ABI.
	msgReady msgKind = 3
	// msgFailed: any stage -> its parent; Error says what failed.
	msgFailed msgKind = 4
	// msgExited: init -> parent; the exit status of the workload (ID 0)
	// or of an exec'd process (its ID).
	msgExited msgKind = 5
	// msgExec: parent -> init; start a process (ID, Exec) through the exec
	// stage, with its stdin, stdout and stderr as three descriptors.
	msgExec msgKind = 6
	// msgExecStarted: init -> parent; process ID has been exec'd. Pid is
	// its pid inside; SCM_CREDENTIALS carries it for the host to translate.
	msgExecStarted msgKind = 7
	// msgSignal: parent -> init; send Signal to process ID.
	msgSignal msgKind = 8
)

// String names the kind.
func (k msgKind) String() string {
	switch k {
	case msgConfig:
		return "config"
	case msgStarted:
		return "started"
	case msgReady:
		return "ready"
	case msgFailed:
		return "failed"
	case msgExited:
		return "exited"
	case msgExec:
		return "exec"
	case msgExecStarted:
		return "exec-started"
	case msgSignal:
		return "signal"
	}
	return fmt.Sprintf("msgKind(%d)", int(k))
}

type message struct {
	Kind msgKind `json:"kind"`
	// ID names an exec'd process (0: the workload, or none).
	ID          uint64       `json:"id,omitempty"`
	Config      *stageConfig `json:"config,omitempty"`
	Exec        *execRequest `json:"exec,omitempty"`
	Pid         int          `json:"pid,omitempty"`
	Warnings    []string     `json:"warnings,omitempty"`
	LandlockABI int          `json:"landlock_abi,omitempty"`
	Error       string       `json:"error,omitempty"`
	// Permanent marks a msgFailed whose cause no retry heals
	// (ErrCannotStart).
	Permanent bool           `json:"permanent,omitempty"`
	Status    *ExitStatus    `json:"status,omitempty"`
	Signal    syscall.Signal `json:"signal,omitempty"`

	// credPid is the pid of the packet's SCM_CREDENTIALS as numbered in
	// the receiver's pid namespace (0: none came; only a socket with
	// SO_PASSCRED gets them).
	credPid int
}

// execRequest is what an exec'd process gets instead of the workload's
// argv, environment and working directory, and how its terminal is set up.
type execRequest struct {
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Workdir string   `json:"workdir"`
	Setsid  bool     `json:"setsid,omitempty"`
	Setctty bool     `json:"setctty,omitempty"`
}

// errBadMessage: one packet could not be read as a message; the channel
// itself is still usable.
var errBadMessage = errors.New("bad message")

const (
	// maxMessage bounds one packet (the config, with the workload's argv
	// and environment, is the largest).
	maxMessage = 192 << 10
	// maxFDs bounds the descriptors of one packet.
	maxFDs = 8
)

// fileConn turns the socket fd into a *net.UnixConn (which holds a
// close-on-exec duplicate) and closes fd.
func fileConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "nsrun-channel")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("channel fd %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("channel fd %d is a %T, not a unix socket", fd, c)
	}
	return uc, nil
}

func send(c *net.UnixConn, m message, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	return sendOOB(c, m, oob)
}

// sendAs sends m with SCM_CREDENTIALS naming pid (a process of the
// sender's pid namespace), which the kernel translates into the receiver's
// numbering. Naming another process needs CAP_SYS_ADMIN over the pid
// namespace, which init has; should the kernel refuse (or pid be gone
// already), m goes without, and the receiver sees the sender's own pid.
func sendAs(c *net.UnixConn, m message, pid int, fds ...int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	cred := unix.UnixCredentials(&unix.Ucred{Pid: int32(pid), Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())})
	err := sendOOB(c, m, append(oob, cred...))
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EINVAL) {
		return send(c, m, fds...)
	}
	return err
}

func sendOOB(c *net.UnixConn, m message, oob []byte) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Kind, err)
	}
	if len(b) > maxMessage {
		return fmt.Errorf("send %s: %d bytes, more than %d", m.Kind, len(b), maxMessage)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("send %s: %w", m.Kind, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it (already
// close-on-exec). It returns io.EOF when the peer has closed, and an error
// wrapping errBadMessage when only this packet was unreadable.
func recv(c *net.UnixConn) (message, []int, error) {
	b := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4)+unix.CmsgSpace(unix.SizeofUcred))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if errors.Is(err, unix.ECONNRESET) {
		// The peer closed with our last message unread.
		return message{}, nil, io.EOF
	}
	if err != nil {
		return message{}, nil, fmt.Errorf("receive: %w", err)
	}
	fds, credPid, ferr := parseControl(oob[:oobn])
	switch {
	case ferr != nil:
		err = fmt.Errorf("%w: %w", errBadMessage, ferr)
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		err = fmt.Errorf("receive: %w: truncated (flags %#x)", errBadMessage, flags)
	case n == 0:
		err = io.EOF
	}
	m := message{credPid: credPid}
	if err == nil {
		if err = json.Unmarshal(b[:n], &m); err != nil {
			err = fmt.Errorf("%w: decode: %w", errBadMessage, err)
		}
	}
	if err != nil {
		closeFDs(fds)
		return message{}, nil, err
	}
	return m, fds, nil
}

// parseControl returns the descriptors of SCM_RIGHTS and the pid of
// SCM_CREDENTIALS.
func parseControl(oob []byte) ([]int, int, error) {
	if len(oob) == 0 {
		return nil, 0, nil
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, 0, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	pid := 0
	for _, cm := range cmsgs {
		if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SCM_CREDENTIALS {
			cred, err := unix.ParseUnixCredentials(&cm)
			if err == nil {
				pid = int(cred.Pid)
			}
			continue
		}
		got, err := unix.ParseUnixRights(&cm)
		if err != nil {
			closeFDs(fds)
			return nil, 0, fmt.Errorf("parse SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, pid, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
