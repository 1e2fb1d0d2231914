package sshd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal pair through /dev/ptmx. The master is
// non-blocking and registered with Go's poller (read deadlines and Close
// unblock readers); the slave is blocking, as a child expects its tty.
func openPty() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sshd: open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	fail := func(what string, err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, fmt.Errorf("sshd: pty %s: %w", what, err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail("number", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open "+name, err)
	}
	return master, os.NewFile(uintptr(sfd), name), nil
}

// setWinsize sets the terminal size through the master (the kernel applies
// it to the slave and sends SIGWINCH to its foreground process group).
// Fd() is not used: it would switch the master to blocking mode.
func setWinsize(master *os.File, cols, rows, xpx, ypx uint32) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return fmt.Errorf("sshd: winsize: %w", err)
	}
	ws := &unix.Winsize{Col: clamp16(cols), Row: clamp16(rows), Xpixel: clamp16(xpx), Ypixel: clamp16(ypx)}
	var ierr error
	if err := rc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return fmt.Errorf("sshd: winsize: %w", err)
	}
	if ierr != nil {
		return fmt.Errorf("sshd: TIOCSWINSZ: %w", ierr)
	}
	return nil
}

func clamp16(v uint32) uint16 { return uint16(min(v, 0xffff)) }
