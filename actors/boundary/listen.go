package boundary

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// acceptLoop runs Accept on ln in a goroutine, handing each connection to
// deliver, until stop is called or deliver returns false (the loop then
// ends and leaves the next connections in the listener's backlog).
// Stopping does not close the listener (its fd belongs to the boundary and
// survives a restart of the listener actor): it sets a deadline in the past
// to interrupt Accept, waits, and clears it.
type acceptLoop struct {
	ln   net.Listener
	done chan struct{}
	quit chan struct{}
}

type deadliner interface{ SetDeadline(time.Time) error }

func startAcceptLoop(ln net.Listener, deliver func(net.Conn) bool, fail func(error)) *acceptLoop {
	l := &acceptLoop{ln: ln, done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(l.done)
		backoff := 5 * time.Millisecond
		for {
			c, err := ln.Accept()
			if err == nil {
				backoff = 5 * time.Millisecond
				if !deliver(c) {
					return
				}
				continue
			}
			select {
			case <-l.quit:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				fail(fmt.Errorf("accept on %s: listener closed: %w", ln.Addr(), err))
				return
			}
			// EMFILE, ECONNABORTED and friends: back off and keep serving.
			time.Sleep(backoff)
			if backoff < time.Second {
				backoff *= 2
			}
		}
	}()
	return l
}

func (l *acceptLoop) stop() {
	close(l.quit)
	d, ok := l.ln.(deadliner)
	if ok {
		_ = d.SetDeadline(time.Unix(1, 0))
	}
	<-l.done
	if ok {
		_ = d.SetDeadline(time.Time{})
	}
}

// sendTo returns a function that sends messages to pid from outside the
// actor (goroutines doing blocking I/O report back this way).
func sendTo(sys *actor.ActorSystem, pid *actor.PID) func(any) {
	return func(m any) { sys.Root.Send(pid, m) }
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// ListenDNS opens a UDP and a TCP listener on the same address. With port 0
// it retries until the kernel's UDP port is also free for TCP.
func ListenDNS(addr string) (net.PacketConn, net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("dns listen %q: %w", addr, err)
	}
	tries := 1
	if port == "0" {
		tries = 20
	}
	for i := 0; ; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("dns listen udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		_ = pc.Close()
		if i+1 >= tries {
			return nil, nil, fmt.Errorf("dns listen tcp %s: %w", pc.LocalAddr(), err)
		}
	}
}
