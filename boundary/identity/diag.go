package identity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layouts from <linux/inet_diag.h>; x/sys/unix has no inet_diag types.
const (
	inetDiagReqV2Len = 56 // family, protocol, ext, pad, states u32, inet_diag_sockid (48)
	inetDiagMsgLen   = 72 // family, state, timer, retrans, sockid (48), expires, rqueue, wqueue, uid, inode
	diagRequestLen   = unix.SizeofNlMsghdr + inetDiagReqV2Len

	// Offsets inside inet_diag_msg.
	diagMsgUID   = 64
	diagMsgInode = 68

	tcpListen    = 10
	diagStates   = ^uint32(1 << tcpListen) // every TCP state but LISTEN
	diagNoCookie = ^uint32(0)              // INET_DIAG_NOCOOKIE, both halves

	diagRecvBuf = 8192
)

// diagConn is one NETLINK_SOCK_DIAG socket used for exact lookups. Requests
// are serialised by mu; the kernel answers synchronously inside the send, so
// each reply is already queued when recv runs.
type diagConn struct {
	mu     sync.Mutex
	fd     int
	seq    uint32
	closed bool
	req    [diagRequestLen]byte
	buf    [diagRecvBuf]byte
}

// openDiag creates a sock_diag socket in the caller's network namespace.
func openDiag() (*diagConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("identity: open sock_diag socket: %w", err)
	}
	return &diagConn{fd: fd}, nil
}

// adoptDiag checks that fd is a NETLINK_SOCK_DIAG socket and takes it over.
func adoptDiag(fd int) (*diagConn, error) {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return nil, fmt.Errorf("identity: diag fd %d: %w", fd, err)
	}
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("identity: diag fd %d: %w", fd, err)
	}
	if dom != unix.AF_NETLINK || proto != unix.NETLINK_SOCK_DIAG {
		return nil, fmt.Errorf("identity: diag fd %d is not a NETLINK_SOCK_DIAG socket (domain %d, protocol %d)", fd, dom, proto)
	}
	return &diagConn{fd: fd}, nil
}

func (d *diagConn) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	return unix.Close(d.fd)
}

// diagResult is what an exact lookup returns about the client socket.
type diagResult struct {
	inode uint32
	uid   uint32
	state uint8
}

// lookup asks for the TCP socket whose local end is src and remote end is
// dst (for the client's socket: src = the client, dst = the proxy).
func (d *diagConn) lookup(src, dst netip.AddrPort) (diagResult, error) {
	family, err := diagFamily(src.Addr(), dst.Addr())
	if err != nil {
		return diagResult{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return diagResult{}, fmt.Errorf("sock_diag: %w", net.ErrClosed)
	}
	d.seq++
	packRequest(d.req[:], d.seq, family, src, dst)
	if _, err := unix.Write(d.fd, d.req[:]); err != nil {
		return diagResult{}, fmt.Errorf("sock_diag send: %w", err)
	}
	for {
		n, err := d.recv()
		if err != nil {
			return diagResult{}, err
		}
		res, done, err := parseReply(d.buf[:n], d.seq)
		if done || err != nil {
			return res, err
		}
	}
}

// recv reads one datagram without blocking; the reply was queued during the
// send, so EAGAIN is waited out only briefly (should the kernel ever defer).
func (d *diagConn) recv() (int, error) {
	for tries := 0; ; tries++ {
		n, err := recvNoAddr(d.fd, d.buf[:], unix.MSG_DONTWAIT)
		if err == nil {
			return n, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.EAGAIN) || tries > 0 {
			return 0, fmt.Errorf("sock_diag recv: %w", err)
		}
		pfd := []unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 100); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, fmt.Errorf("sock_diag poll: %w", err)
		}
	}
}

func diagFamily(a, b netip.Addr) (uint8, error) {
	a, b = a.Unmap(), b.Unmap()
	switch {
	case a.Is4() && b.Is4():
		return unix.AF_INET, nil
	case a.Is6() && b.Is6():
		return unix.AF_INET6, nil
	default:
		return 0, fmt.Errorf("sock_diag: address families differ (%s, %s)", a, b)
	}
}

// packRequest writes nlmsghdr + inet_diag_req_v2 for one exact TCP lookup.
func packRequest(b []byte, seq uint32, family uint8, src, dst netip.AddrPort) {
	ne := binary.NativeEndian
	clear(b[:diagRequestLen])
	ne.PutUint32(b[0:], diagRequestLen)
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], seq)
	r := b[unix.SizeofNlMsghdr:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], diagStates)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putAddr(id[4:20], src.Addr())
	putAddr(id[20:36], dst.Addr())
	// id[36:40] idiag_if = 0
	ne.PutUint32(id[40:], diagNoCookie)
	ne.PutUint32(id[44:], diagNoCookie)
}

func putAddr(b []byte, a netip.Addr) {
	a = a.Unmap()
	if a.Is4() {
		v := a.As4()
		copy(b, v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// parseReply scans the netlink messages of one datagram for the answer to
// seq. done is false when the datagram held only stale messages.
func parseReply(b []byte, seq uint32) (res diagResult, done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(ne.Uint32(b[0:]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return res, true, fmt.Errorf("sock_diag: malformed reply (len %d of %d)", l, len(b))
		}
		typ, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
		body := b[unix.SizeofNlMsghdr:l]
		b = b[(l+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1):]
		if mseq != seq {
			continue
		}
		switch typ {
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return res, true, errors.New("sock_diag: short error reply")
			}
			errno := unix.Errno(-int32(ne.Uint32(body)))
			if errno == unix.ENOENT {
				return res, true, fmt.Errorf("sock_diag: no TCP socket with this 4-tuple: %w", ErrSocketNotFound)
			}
			return res, true, fmt.Errorf("sock_diag: %w", errno)
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(body) < inetDiagMsgLen {
				return res, true, fmt.Errorf("sock_diag: short inet_diag_msg (%d bytes)", len(body))
			}
			return diagResult{
				inode: ne.Uint32(body[diagMsgInode:]),
				uid:   ne.Uint32(body[diagMsgUID:]),
				state: body[1],
			}, true, nil
		default:
			return res, true, fmt.Errorf("sock_diag: unexpected message type %d", typ)
		}
	}
	return res, false, nil
}

// recvNoAddr is recvfrom(2) without the sender's address: the datagrams
// read here come from the kernel, and unix.Recvfrom allocates the address
// it decodes on every call (two calls per lookup).
func recvNoAddr(fd int, p []byte, flags int) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// SocketOwners tells who owns the other end of a TCP connection this
// process accepted, when that end is a socket of this network namespace
// (a local process): one NETLINK_SOCK_DIAG socket and the resolver's own
// exact lookup, one request per connection. A listener uses it to tell
// local users apart, who all connect from 127.0.0.1. Safe for concurrent
// use (lookups are serialised).
type SocketOwners struct{ d *diagConn }

// OpenSocketOwners opens the sock_diag socket, in the caller's network
// namespace. It needs no privilege.
func OpenSocketOwners() (*SocketOwners, error) {
	d, err := openDiag()
	if err != nil {
		return nil, err
	}
	return &SocketOwners{d: d}, nil
}

// Owner returns the uid that owns the TCP socket whose local end is peer
// and whose remote end is local: the peer's socket of a connection
// accepted on local from peer. The error wraps ErrSocketNotFound when
// this namespace has no such socket (the peer is on another host or in
// another network namespace, or already closed).
func (s *SocketOwners) Owner(peer, local netip.AddrPort) (uint32, error) {
	r, err := s.d.lookup(peer, local)
	if err != nil {
		return 0, err
	}
	return r.uid, nil
}

// Close closes the sock_diag socket; later lookups fail.
func (s *SocketOwners) Close() error { return s.d.close() }
