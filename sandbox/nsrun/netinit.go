package nsrun

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// listenBacklog is the proxy's and DNS TCP listener's accept queue (the
// kernel clamps it to net.core.somaxconn).
const listenBacklog = 4096

// Order of the descriptors init passes to the parent.
const (
	fdIndexProxy = iota
	fdIndexDNSUDP
	fdIndexDNSTCP
	fdIndexDiag
	fdCount
)

// setUpNetwork runs in init, inside the new network namespace: lo up, then
// the proxy listener (unless the parent made it: parentProxy), the DNS
// sockets and a sock_diag socket, in fdIndex order.
func setUpNetwork(parentProxy bool) ([]int, error) {
	if err := linkUp("lo"); err != nil {
		return nil, err
	}
	fds := make([]int, 0, fdCount)
	for i, mk := range []func() (int, error){
		func() (int, error) { return loopbackSocket(unix.SOCK_STREAM, ProxyPort) },
		func() (int, error) { return loopbackSocket(unix.SOCK_DGRAM, DNSPort) },
		func() (int, error) { return loopbackSocket(unix.SOCK_STREAM, DNSPort) },
		func() (int, error) {
			fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
			if err != nil {
				return -1, fmt.Errorf("sock_diag socket: %w", err)
			}
			return fd, nil
		},
	} {
		if i == fdIndexProxy && parentProxy {
			continue
		}
		fd, err := mk()
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// proxyListenerIn makes the proxy listener (127.0.0.1:ProxyPort) inside
// the network namespace of process pid, from the caller (root: setns needs
// CAP_SYS_ADMIN in the caller's user namespace too), lo brought up first;
// before init is told to start anything, so it listens before the
// workload runs. Made here rather than by init, it is the net package's
// own listener with keep-alive off: a listener adopted from a descriptor
// (net.FileListener) turns keep-alive on for every accepted connection,
// four setsockopt calls per tunnel that the proxy does not want (its
// clients are on this machine, and a tunnel ends with either end).
func proxyListenerIn(pid int) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	got := make(chan result, 1)
	go func() {
		// The thread is unlocked only once it is back in its own
		// namespace; a thread left locked ends with this goroutine.
		runtime.LockOSThread()
		ln, back, err := listenInNetns(pid)
		if back {
			runtime.UnlockOSThread()
		}
		got <- result{ln, err}
	}()
	r := <-got
	if r.err != nil {
		return nil, fmt.Errorf("proxy listener in the sandbox's network namespace: %w", r.err)
	}
	return r.ln, nil
}

// listenInNetns is proxyListenerIn's work on a locked thread; back
// reports that the thread is in its own network namespace again.
func listenInNetns(pid int) (ln net.Listener, back bool, err error) {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("own network namespace: %w", err)
	}
	defer unix.Close(self)
	target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("network namespace of %d: %w", pid, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("setns: %w", err)
	}
	if err = linkUp("lo"); err == nil {
		lc := net.ListenConfig{KeepAlive: -1}
		ln, err = lc.Listen(context.Background(), "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(ProxyPort)))
	}
	if rerr := unix.Setns(self, unix.CLONE_NEWNET); rerr != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, false, fmt.Errorf("setns back: %w", rerr)
	}
	return ln, true, err
}

// loopbackSocket returns a socket bound to 127.0.0.1:port, listening if it
// is a stream socket.
func loopbackSocket(typ, port int) (int, error) {
	name := "udp"
	if typ == unix.SOCK_STREAM {
		name = "tcp"
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s socket: %w", name, err)
	}
	err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	}
	if err == nil && typ == unix.SOCK_STREAM {
		err = unix.Listen(fd, listenBacklog)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s 127.0.0.1:%d: %w", name, port, err)
	}
	return fd, nil
}

// linkUp sets IFF_UP on the named link with one RTM_NEWLINK request and
// waits for the kernel's acknowledgement.
func linkUp(name string) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("link %s up: rtnetlink socket: %w", name, err)
	}
	defer unix.Close(fd)
	const reqLen = unix.SizeofNlMsghdr + unix.SizeofIfInfomsg
	var req [reqLen]byte
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], reqLen)
	ne.PutUint16(req[4:], unix.RTM_NEWLINK)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(req[8:], 1) // sequence number
	// struct ifinfomsg: family, pad, type, index, flags, change.
	req[16] = unix.AF_UNSPEC
	ne.PutUint32(req[20:], uint32(ifi.Index))
	ne.PutUint32(req[24:], unix.IFF_UP)
	ne.PutUint32(req[28:], unix.IFF_UP)
	if err := unix.Sendto(fd, req[:], 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("link %s up: send RTM_NEWLINK: %w", name, err)
	}
	var resp [4096]byte
	n, _, err := unix.Recvfrom(fd, resp[:], 0)
	if err != nil {
		return fmt.Errorf("link %s up: read ack: %w", name, err)
	}
	// The answer is one NLMSG_ERROR whose error field is 0 for success.
	if n < unix.SizeofNlMsghdr+4 || ne.Uint16(resp[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("link %s up: unexpected rtnetlink answer (%d bytes)", name, n)
	}
	if errno := int32(ne.Uint32(resp[unix.SizeofNlMsghdr:])); errno != 0 {
		return fmt.Errorf("link %s up: RTM_NEWLINK: %w", name, unix.Errno(-errno))
	}
	return nil
}
