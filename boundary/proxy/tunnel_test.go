package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	var s net.Conn
	select {
	case s = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("accept: timed out")
	}
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func sockopt(t *testing.T, c *net.TCPConn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("syscall conn: %v", err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatalf("control: %v", err)
	}
	if gerr != nil {
		t.Fatalf("getsockopt: %v", gerr)
	}
	return v
}

// bounds is what a tunnel's two sockets say about the bulk bounds: the
// client socket's receive buffer and the upstream's unsent bound.
type bounds struct{ clientRcv, upNotSent int }

func boundsOf(t *testing.T, client, up *net.TCPConn) bounds {
	t.Helper()
	return bounds{sockopt(t, client, unix.SOL_SOCKET, unix.SO_RCVBUF), sockopt(t, up, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)}
}

// pipeThrough sends payload (pending first) through PipeFromClient, from
// the boundary's client socket to its upstream socket, and returns what
// arrived with the bounds before and after.
func pipeThrough(t *testing.T, pending string, payload []byte) (got []byte, before, after bounds) {
	t.Helper()
	writer, client := tcpPair(t)
	up, reader := tcpPair(t)
	var pr *bufio.Reader
	if pending != "" {
		pr = bufio.NewReader(strings.NewReader(pending))
		if _, err := pr.Peek(len(pending)); err != nil {
			t.Fatalf("peek: %v", err)
		}
	}
	before = boundsOf(t, client, up)
	done := make(chan error, 1)
	go func() {
		_, err := PipeFromClient(up, client, pr)
		done <- err
	}()
	go func() {
		_, _ = writer.Write(payload)
		_ = writer.CloseWrite()
	}()
	got, err := io.ReadAll(reader)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("PipeFromClient: %v", err)
	}
	return got, before, boundsOf(t, client, up)
}

// rmemMax is net.core.rmem_max: the kernel caps SO_RCVBUF at it.
func rmemMax(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatalf("read rmem_max: %v", err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("rmem_max %q: %v", b, err)
	}
	return v
}

// TestPipeFromClientBoundsOnlyBulk reads the bounds back from the kernel.
// A stream of BulkAfter bytes or more arrives whole and in order, and
// leaves the client socket's receive buffer at ClientReadBuffer (capped by
// net.core.rmem_max, doubled by the kernel) and the upstream's unsent
// bound at NotSentLowat; a short one (pending bytes included) arrives
// whole and leaves both as they were: a short tunnel pays no system call
// for them.
func TestPipeFromClientBoundsOnlyBulk(t *testing.T) {
	bounded := bounds{2 * min(ClientReadBuffer, rmemMax(t)), NotSentLowat}

	long := make([]byte, 3*BulkAfter+12345)
	for i := range long {
		long[i] = byte(i * 7)
	}
	got, before, after := pipeThrough(t, "head:", long)
	if want := append([]byte("head:"), long...); !bytes.Equal(got, want) {
		t.Fatalf("long stream: got %d bytes, want %d, equal=%v", len(got), len(want), bytes.Equal(got, want))
	}
	if before == bounded || after != bounded {
		t.Fatalf("long stream: bounds %+v before, %+v after; want %+v after only", before, after, bounded)
	}

	got, before, after = pipeThrough(t, "head:", []byte("short body"))
	if string(got) != "head:short body" {
		t.Fatalf("short stream: got %q", got)
	}
	if after != before {
		t.Fatalf("short stream: bounds %+v before, %+v after; want them untouched", before, after)
	}

	exact := bytes.Repeat([]byte{'x'}, BulkAfter)
	got, _, after = pipeThrough(t, "", exact)
	if !bytes.Equal(got, exact) || after != bounded {
		t.Fatalf("exactly BulkAfter bytes: got %d bytes, bounds %+v; want %d and %+v", len(got), after, BulkAfter, bounded)
	}
}

// TestBoundBulkLeavesTheRestAlone: the upstream's receive buffer stays the
// kernel's to tune, and a connection that is not TCP is left as it is.
func TestBoundBulkLeavesTheRestAlone(t *testing.T) {
	client, _ := tcpPair(t)
	up, _ := tcpPair(t)
	upRcv := sockopt(t, up, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err := boundBulk(client, up); err != nil {
		t.Fatalf("boundBulk: %v", err)
	}
	if got := sockopt(t, up, unix.SOL_SOCKET, unix.SO_RCVBUF); got != upRcv {
		t.Fatalf("upstream SO_RCVBUF changed: %d, was %d", got, upRcv)
	}
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if err := boundBulk(a, b); err != nil {
		t.Fatalf("boundBulk on net.Pipe: %v", err)
	}
}
