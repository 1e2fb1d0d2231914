package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// What a tunnel that carries bulk lets the kernel hold for it. The
// client is on this machine (a sandbox's loopback or veth, a local agent):
// a receive buffer of ClientReadBuffer (capped by net.core.rmem_max, then
// doubled by the kernel for its own overhead) is a window of up to 2 MiB,
// 2 GB/s at 1 ms, and stops the kernel from growing the queue of a fast
// client to tcp_rmem's maximum (23 MB seen in one bulk tunnel whose
// upstream read slower than its client wrote). Upstreams are remote: their
// windows stay the kernel's to tune, and NotSentLowat bounds only what
// waits unsent in the send queue, never what is in flight. Both are set
// once the client's direction has carried BulkAfter bytes, so a short
// tunnel pays no system call for them.
const (
	ClientReadBuffer = 1 << 20
	NotSentLowat     = 1 << 20
	BulkAfter        = 1 << 20
)

// boundBulk applies the bulk bounds to a tunnel: client's receive buffer,
// upstream's unsent bytes. A connection that is not TCP is left as it is.
func boundBulk(client, upstream net.Conn) error {
	var errs []error
	if tc, ok := client.(*net.TCPConn); ok {
		if err := tc.SetReadBuffer(ClientReadBuffer); err != nil {
			errs = append(errs, fmt.Errorf("tunnel: client receive buffer: %w", err))
		}
	}
	if tc, ok := upstream.(*net.TCPConn); ok {
		rc, err := tc.SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, NotSentLowat)
			})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("tunnel: upstream TCP_NOTSENT_LOWAT: %w", err))
		}
	}
	return errors.Join(errs...)
}

// halfCloser is a connection that can close its write side (TCP, unix).
type halfCloser interface{ CloseWrite() error }

// Pipe copies bytes from src to dst until src ends, then half-closes dst so
// the peer sees EOF while the other direction keeps flowing. pending holds
// bytes already read from src (buffered past a request header); it is
// written first. On TCP-to-TCP, io.Copy uses splice(2): bytes never enter
// user space.
func Pipe(dst, src net.Conn, pending *bufio.Reader) (int64, error) {
	n, err := writePending(dst, pending)
	if err != nil {
		return n, err
	}
	m, err := io.Copy(dst, src)
	return n + m, endPipe(dst, err)
}

// PipeFromClient is Pipe for the client's direction of a tunnel: once
// BulkAfter bytes have gone to the upstream, it bounds the tunnel's kernel
// buffers (boundBulk) and goes on. A client that ends sooner never has
// them set.
func PipeFromClient(up, client net.Conn, pending *bufio.Reader) (int64, error) {
	n, err := writePending(up, pending)
	if err != nil {
		return n, err
	}
	if n < BulkAfter {
		m, err := io.Copy(up, &io.LimitedReader{R: client, N: BulkAfter - n})
		n += m
		if err != nil || n < BulkAfter { // failed, or the client ended first
			return n, endPipe(up, err)
		}
		_ = boundBulk(client, up) // a bound, not a need: the tunnel works without it
	}
	m, err := io.Copy(up, client)
	return n + m, endPipe(up, err)
}

// writePending writes what pending holds to dst.
func writePending(dst net.Conn, pending *bufio.Reader) (int64, error) {
	if pending == nil || pending.Buffered() == 0 {
		return 0, nil
	}
	buf, _ := pending.Peek(pending.Buffered())
	m, err := dst.Write(buf)
	if err != nil {
		return int64(m), fmt.Errorf("tunnel: write buffered bytes: %w", err)
	}
	_, _ = pending.Discard(m)
	return int64(m), nil
}

// endPipe half-closes dst and wraps a copy error (a closed connection is
// how a tunnel is stopped, not an error).
func endPipe(dst net.Conn, err error) error {
	if hc, ok := dst.(halfCloser); ok {
		_ = hc.CloseWrite()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("tunnel: copy: %w", err)
	}
	return nil
}
