package identity

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadlinkFd reads descriptor links as os.Readlink does, through a
// process directory ("fd/N") and a descriptor directory ("N"), without
// allocating; a closed descriptor is ENOENT.
func TestReadlinkFd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var sock int
	_ = rc.Control(func(fd uintptr) { sock = int(fd) })

	self, err := unix.Open(fmt.Sprintf("/proc/%d", os.Getpid()), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(self)
	fds, err := unix.Open(fmt.Sprintf("/proc/%d/fd", os.Getpid()), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds)

	for _, fd := range []int{sock, int(f.Fd())} {
		want, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			dir    int
			prefix string
		}{{self, "fd/"}, {fds, ""}} {
			var buf [256]byte
			n, err := readlinkFd(c.dir, c.prefix, fd, buf[:])
			if err != nil || string(buf[:n]) != want {
				t.Fatalf("readlinkFd(%q, %d) = %q, %v; want %q", c.prefix, fd, buf[:n], err, want)
			}
		}
	}
	var buf [64]byte
	if _, err := readlinkFd(fds, "", 1<<30, buf[:]); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("readlinkFd of a closed descriptor: %v, want ENOENT", err)
	}
	if n := testing.AllocsPerRun(50, func() { _, _ = readlinkFd(self, "fd/", sock, buf[:]) }); n != 0 {
		t.Fatalf("readlinkFd: %v allocations per call, want 0", n)
	}
}
