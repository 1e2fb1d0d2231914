package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
)

// halfCloser is a connection that can close its write side (TCP, unix).
type halfCloser interface{ CloseWrite() error }

// Pipe copies bytes from src to dst until src ends, then half-closes dst so
// the peer sees EOF while the other direction keeps flowing. pending holds
// bytes already read from src (buffered past a request header); it is
// written first. On TCP-to-TCP, io.Copy uses splice(2): bytes never enter
// user space.
func Pipe(dst, src net.Conn, pending *bufio.Reader) (int64, error) {
	var n int64
	if pending != nil && pending.Buffered() > 0 {
		buf, _ := pending.Peek(pending.Buffered())
		m, err := dst.Write(buf)
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("tunnel: write buffered bytes: %w", err)
		}
		_, _ = pending.Discard(m)
	}
	m, err := io.Copy(dst, src)
	n += m
	if hc, ok := dst.(halfCloser); ok {
		_ = hc.CloseWrite()
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return n, fmt.Errorf("tunnel: copy: %w", err)
	}
	return n, nil
}
