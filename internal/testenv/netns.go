package testenv

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace of a test's own with its loopback up,
// entered by one locked thread: sockets made in a function given to Run
// are that namespace's. The thread never returns to the runtime (it exits
// with its goroutine when the test ends), so no other goroutine runs in the
// namespace.
type Netns struct {
	do   chan func()
	quit chan struct{} // closed at the test's end
	gone chan struct{} // closed when the namespace's goroutine has ended
}

// NewNetns enters a new network namespace, or calls Unavailable (it needs
// root).
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	NeedRoot(t)
	n := &Netns{do: make(chan func()), quit: make(chan struct{}), gone: make(chan struct{})}
	entered := make(chan error, 1)
	go func() {
		defer close(n.gone)
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			entered <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			entered <- fmt.Errorf("loopback up: %w", err)
			return
		}
		entered <- nil
		for {
			select {
			case f := <-n.do:
				f()
			case <-n.quit:
				return
			}
		}
	}()
	if err := <-entered; err != nil {
		Unavailable(t, "a network namespace: %v", err)
	}
	t.Cleanup(func() { close(n.quit) })
	return n
}

// Run calls f on the namespace's thread and returns its error. f must not
// call t.FailNow (or Fatal, Skip): that would end the namespace's
// goroutine; Run then returns an error, as it does after the test's end.
func (n *Netns) Run(f func() error) error {
	done := make(chan error, 1)
	select {
	case n.do <- func() { done <- f() }:
	case <-n.gone:
		return errNetnsGone
	}
	select {
	case err := <-done:
		return err
	case <-n.gone:
		return errNetnsGone
	}
}

var errNetnsGone = errors.New("testenv: the network namespace's thread has ended (the test ended, or a function given to Run called t.FailNow)")

// loopbackUp sets the namespace's lo up (a new namespace's is down).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
