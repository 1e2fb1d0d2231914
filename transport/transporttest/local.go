package transporttest

import (
	"fmt"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// DialAs opens a TCP connection to addr whose socket belongs to uid, as a
// process of that local user would: the kernel records the creating
// thread's filesystem uid as a socket's owner, so a test running as root
// makes it on a thread of its own with setfsuid(2), and that thread ends
// with the dial (it is never used again). Nothing is sent.
func DialAs(uid int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine.
		runtime.LockOSThread()
		if err := unix.Setfsuid(uid); err != nil {
			ch <- result{nil, fmt.Errorf("transporttest: setfsuid %d: %w", uid, err)}
			return
		}
		if got, _ := unix.SetfsuidRetUid(uid); got != uid {
			ch <- result{nil, fmt.Errorf("transporttest: setfsuid %d: still %d (needs CAP_SETUID)", uid, got)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
