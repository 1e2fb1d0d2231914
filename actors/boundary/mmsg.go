package boundary

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgConn reads and writes batches of IPv4 datagrams on a UDP socket,
// several per system call (recvmmsg, sendmmsg), through the runtime's
// poller (deadlines and Close work as for the socket's own reads). A
// client's address goes from the kernel's sockaddr to a netip.AddrPort
// and back with no allocation per datagram (golang.org/x/net/ipv4 made a
// *net.UDPAddr for each one read, and packed a sockaddr from it again for
// each reply).
type mmsgConn struct{ rc syscall.RawConn }

// mmsghdr is struct mmsghdr: a message header and the length the call
// read or wrote for it.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// mmsgBufs is the system-call side of up to dnsBatchMax datagrams: a
// header, an iovec and a client address each.
type mmsgBufs struct {
	hdrs  [dnsBatchMax]mmsghdr
	iovs  [dnsBatchMax]unix.Iovec
	names [dnsBatchMax]unix.RawSockaddrInet4
}

// newBatchConn returns pc's batch reads and writes, or nil when it can
// have none: not a UDP socket, or not an IPv4 one (an IPv4-mapped client
// of a dual-stack socket would need an IPv6 sockaddr; those sockets read
// and write one datagram at a time).
func newBatchConn(pc net.PacketConn) *mmsgConn {
	uc, ok := pc.(*net.UDPConn)
	if !ok {
		return nil
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	domain := -1
	if err := rc.Control(func(fd uintptr) {
		domain, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil || domain != unix.AF_INET {
		return nil
	}
	return &mmsgConn{rc: rc}
}

// recv reads up to len(bufs) datagrams, the i-th into bufs[i], waiting
// until at least one is there. For each of the n read, m.hdrs[i].n is its
// length, m.names[i] its client and m.hdrs[i].hdr.Flags has MSG_TRUNC when
// it was longer than bufs[i]. Errors are the socket's: a deadline, a
// closed socket, or an ICMP error of an earlier reply.
func (c *mmsgConn) recv(m *mmsgBufs, bufs [][]byte) (int, error) {
	for i, b := range bufs {
		m.iovs[i].Base = &b[0]
		m.iovs[i].SetLen(len(b))
		m.header(i)
	}
	return c.call(unix.SYS_RECVMMSG, m.hdrs[:len(bufs)], false)
}

// send writes the n datagrams whose bytes and clients setOut put in m,
// in as few calls as the kernel allows. It returns how many left; on an
// error, datagram sent (the first not written) is the one refused.
func (c *mmsgConn) send(m *mmsgBufs, n int) (int, error) {
	for i := range n {
		m.header(i)
	}
	sent := 0
	for sent < n {
		k, err := c.call(unix.SYS_SENDMMSG, m.hdrs[sent:n], true)
		if err != nil {
			return sent, err
		}
		if k <= 0 {
			// The kernel does not do this, but a loop must not spin on it.
			return sent, errors.New("sendmmsg: no datagram written and no error")
		}
		sent += k
	}
	return sent, nil
}

// header points datagram i's message header at its iovec and address
// (the kernel rewrites the address length of a read).
func (m *mmsgBufs) header(i int) {
	h := &m.hdrs[i].hdr
	*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&m.names[i])), Namelen: unix.SizeofSockaddrInet4, Iov: &m.iovs[i]}
	h.SetIovlen(1)
}

// setOut puts datagram i of a send: its bytes (not empty) and its client
// (an IPv4 one: the socket is).
func (m *mmsgBufs) setOut(i int, b []byte, to netip.AddrPort) {
	m.iovs[i].Base = &b[0]
	m.iovs[i].SetLen(len(b))
	m.names[i] = sockaddrOf(to)
}

// call makes one recvmmsg or sendmmsg (trap) of hdrs, waiting in the
// poller while the socket would block.
func (c *mmsgConn) call(trap uintptr, hdrs []mmsghdr, write bool) (int, error) {
	var (
		got   int
		errno syscall.Errno
	)
	do := func(fd uintptr) bool {
		for {
			r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false
			}
			got, errno = int(r), e
			return true
		}
	}
	var err error
	if write {
		err = c.rc.Write(do)
	} else {
		err = c.rc.Read(do)
	}
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		name := "recvmmsg"
		if write {
			name = "sendmmsg"
		}
		return 0, os.NewSyscallError(name, errno)
	}
	return got, nil
}

// sockaddrAddrPort is the address and port of a raw IPv4 sockaddr.
func sockaddrAddrPort(sa *unix.RawSockaddrInet4) netip.AddrPort {
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
}

// sockaddrOf is the raw sockaddr of an IPv4 address and port; its Family
// is AF_UNSPEC (0) for any other address.
func sockaddrOf(ap netip.AddrPort) unix.RawSockaddrInet4 {
	var sa unix.RawSockaddrInet4
	if !ap.Addr().Is4() {
		return sa
	}
	sa.Family, sa.Addr = unix.AF_INET, ap.Addr().As4()
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(ap.Port()>>8), byte(ap.Port())
	return sa
}
