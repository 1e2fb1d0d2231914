package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Upstream is the local upstream of the benchmark: an echo listener (every
// byte read is written back) and a sink listener (every byte read is
// discarded). Each accepted connection lives until its peer closes it or
// Close is called.
type Upstream struct {
	echo  net.Listener
	sink  net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// ListenUpstream binds the echo and sink listeners (e.g. "127.0.0.1:0") and
// starts serving them.
func ListenUpstream(echoAddr, sinkAddr string) (*Upstream, error) {
	echo, err := net.Listen("tcp", echoAddr)
	if err != nil {
		return nil, fmt.Errorf("listen echo %s: %w", echoAddr, err)
	}
	sink, err := net.Listen("tcp", sinkAddr)
	if err != nil {
		_ = echo.Close()
		return nil, fmt.Errorf("listen sink %s: %w", sinkAddr, err)
	}
	u := &Upstream{echo: echo, sink: sink, conns: make(map[net.Conn]struct{})}
	u.wg.Add(2)
	go u.accept(echo, func(c net.Conn) { _, _ = io.Copy(c, c) })
	go u.accept(sink, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	return u, nil
}

// EchoAddr is the bound address of the echo listener.
func (u *Upstream) EchoAddr() string { return u.echo.Addr().String() }

// SinkAddr is the bound address of the sink listener.
func (u *Upstream) SinkAddr() string { return u.sink.Addr().String() }

func (u *Upstream) accept(l net.Listener, serve func(net.Conn)) {
	defer u.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. EMFILE under load: keep serving
		}
		if !u.track(c) {
			_ = c.Close()
			return
		}
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			defer u.untrack(c)
			serve(c)
		}()
	}
}

func (u *Upstream) track(c net.Conn) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return false
	}
	u.conns[c] = struct{}{}
	return true
}

func (u *Upstream) untrack(c net.Conn) {
	u.mu.Lock()
	delete(u.conns, c)
	u.mu.Unlock()
	_ = c.Close()
}

// Close stops both listeners, closes every open connection and waits for
// the serving goroutines to end.
func (u *Upstream) Close() error {
	u.mu.Lock()
	u.done = true
	for c := range u.conns {
		_ = c.Close()
	}
	u.mu.Unlock()
	err := errors.Join(u.echo.Close(), u.sink.Close())
	u.wg.Wait()
	return err
}

// Serve blocks until ctx is done, then closes the upstream.
func (u *Upstream) Serve(ctx context.Context) error {
	<-ctx.Done()
	return u.Close()
}
