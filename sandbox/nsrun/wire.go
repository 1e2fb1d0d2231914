package nsrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

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
	// sandbox, the warnings, the Landlock ABI and the four descriptors.
	msgStarted msgKind = 2
	// msgReady: exec -> init, just before execve; warnings and ABI.
	msgReady msgKind = 3
	// msgFailed: any stage -> its parent; Error says what failed.
	msgFailed msgKind = 4
	// msgExited: init -> parent; the workload's exit status.
	msgExited msgKind = 5
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
	}
	return fmt.Sprintf("msgKind(%d)", int(k))
}

type message struct {
	Kind        msgKind      `json:"kind"`
	Config      *stageConfig `json:"config,omitempty"`
	Pid         int          `json:"pid,omitempty"`
	Warnings    []string     `json:"warnings,omitempty"`
	LandlockABI int          `json:"landlock_abi,omitempty"`
	Error       string       `json:"error,omitempty"`
	Status      *ExitStatus  `json:"status,omitempty"`
}

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
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Kind, err)
	}
	if len(b) > maxMessage {
		return fmt.Errorf("send %s: %d bytes, more than %d", m.Kind, len(b), maxMessage)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("send %s: %w", m.Kind, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it (already
// close-on-exec). It returns io.EOF when the peer has closed.
func recv(c *net.UnixConn) (message, []int, error) {
	b := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(b, oob)
	if errors.Is(err, unix.ECONNRESET) {
		// The peer closed with our last message unread.
		return message{}, nil, io.EOF
	}
	if err != nil {
		return message{}, nil, fmt.Errorf("receive: %w", err)
	}
	fds, ferr := parseRights(oob[:oobn])
	switch {
	case ferr != nil:
		err = ferr
	case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
		err = fmt.Errorf("receive: message truncated (flags %#x)", flags)
	case n == 0:
		err = io.EOF
	}
	var m message
	if err == nil {
		if err = json.Unmarshal(b[:n], &m); err != nil {
			err = fmt.Errorf("decode message: %w", err)
		}
	}
	if err != nil {
		closeFDs(fds)
		return message{}, nil, err
	}
	return m, fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for _, cm := range cmsgs {
		got, err := unix.ParseUnixRights(&cm)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("parse SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
