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

// pipeThrough copies payload (pending first) from one pair to another
// with PipeBulk and returns what arrived and how often bulk was called.
func pipeThrough(t *testing.T, pending string, payload []byte) (got []byte, calls int) {
	t.Helper()
	writer, src := tcpPair(t)
	dst, reader := tcpPair(t)
	var pr *bufio.Reader
	if pending != "" {
		pr = bufio.NewReader(strings.NewReader(pending))
		if _, err := pr.Peek(len(pending)); err != nil {
			t.Fatalf("peek: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := PipeBulk(dst, src, pr, func() { calls++ })
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
		t.Fatalf("PipeBulk: %v", err)
	}
	return got, calls
}

// TestPipeBulkCallsOnceAfterBulkAfter: a stream longer than BulkAfter
// arrives whole, in order, and has its bounds applied exactly once; a
// short one (pending bytes included) arrives whole and is never bounded,
// so a short tunnel pays no system call for the bounds.
func TestPipeBulkCallsOnceAfterBulkAfter(t *testing.T) {
	long := make([]byte, 3*BulkAfter+12345)
	for i := range long {
		long[i] = byte(i * 7)
	}
	got, calls := pipeThrough(t, "head:", long)
	if want := append([]byte("head:"), long...); !bytes.Equal(got, want) {
		t.Fatalf("long stream: got %d bytes, want %d, equal=%v", len(got), len(want), bytes.Equal(got, want))
	}
	if calls != 1 {
		t.Fatalf("long stream: bulk called %d times, want 1", calls)
	}

	got, calls = pipeThrough(t, "head:", []byte("short body"))
	if string(got) != "head:short body" {
		t.Fatalf("short stream: got %q", got)
	}
	if calls != 0 {
		t.Fatalf("short stream: bulk called %d times, want 0", calls)
	}

	exact := bytes.Repeat([]byte{'x'}, BulkAfter)
	got, calls = pipeThrough(t, "", exact)
	if !bytes.Equal(got, exact) || calls != 1 {
		t.Fatalf("exactly BulkAfter bytes: got %d bytes, bulk called %d times; want %d and 1", len(got), calls, BulkAfter)
	}
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

// TestBoundBulkSetsTheBounds reads the options back from the kernel: the
// client's receive buffer is ClientReadBuffer (capped by
// net.core.rmem_max and doubled by the kernel), the
// upstream's unsent bound is NotSentLowat, and the upstream's receive
// buffer is left to the kernel's tuning.
func TestBoundBulkSetsTheBounds(t *testing.T) {
	client, _ := tcpPair(t)
	upstream, _ := tcpPair(t)
	upRcv := sockopt(t, upstream, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err := BoundBulk(client, upstream); err != nil {
		t.Fatalf("BoundBulk: %v", err)
	}
	want := 2 * min(ClientReadBuffer, rmemMax(t))
	if got := sockopt(t, client, unix.SOL_SOCKET, unix.SO_RCVBUF); got != want {
		t.Fatalf("client SO_RCVBUF = %d, want %d (ClientReadBuffer, capped by net.core.rmem_max, doubled)", got, want)
	}
	if got := sockopt(t, upstream, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT); got != NotSentLowat {
		t.Fatalf("upstream TCP_NOTSENT_LOWAT = %d, want %d", got, NotSentLowat)
	}
	if got := sockopt(t, upstream, unix.SOL_SOCKET, unix.SO_RCVBUF); got != upRcv {
		t.Fatalf("upstream SO_RCVBUF changed: %d, was %d", got, upRcv)
	}
	// Not TCP: left as it is, no error.
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if err := BoundBulk(a, b); err != nil {
		t.Fatalf("BoundBulk on net.Pipe: %v", err)
	}
}
