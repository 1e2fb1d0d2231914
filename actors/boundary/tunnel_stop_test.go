package boundary_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/chaos/fault"
)

// TestStopEndsHalfClosedTunnel: a tunnel whose client has finished sending
// (half-closed) while its upstream keeps the connection open and silent
// still ends when the boundary stops: the stop closes the upstream too.
func TestStopEndsHalfClosedTunnel(t *testing.T) {
	e := startEnv(t, envOpts{})
	// An upstream that reads to EOF, then holds the connection open.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sawEOF, stoppedCh := make(chan struct{}), make(chan struct{})
	reset := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(io.Discard, c)
		close(sawEOF)
		<-stoppedCh // silent and open until the boundary has stopped
		// The boundary's side is closed: a write is answered by a reset.
		var err2 error
		for i := 0; i < 50 && err2 == nil; i++ {
			_, err2 = c.Write([]byte("x"))
			time.Sleep(10 * time.Millisecond)
		}
		reset <- err2
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	pol := fmt.Sprintf("version: 1\nnetwork_policies:\n  hold:\n    endpoints:\n      - { host: up.test, port: %d }\n    binaries:\n      - { path: %q }\n", port, exe)
	if _, err := e.engine.Load("hold.yaml", []byte(pol)); err != nil {
		t.Fatal(err)
	}
	code, body, c := e.connect(t, "up.test", port)
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sawEOF:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream never saw the client's half-close")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- e.b.Stop() }()
	select {
	case err := <-stopped:
		close(stoppedCh)
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(5 * time.Second):
		close(stoppedCh)
		t.Fatal("the boundary did not stop within 5 s with a half-closed tunnel open")
	}
	if err := <-reset; err == nil {
		t.Fatal("the upstream connection stayed open after the boundary stopped")
	}
}

// TestProxyRestartWithOpenTunnel: a restart of the proxy actor (a fault in
// its listener) does not wait for open tunnels to end; it cuts them, as it
// stops its children, and the next client is served.
func TestProxyRestartWithOpenTunnel(t *testing.T) {
	e := startEnv(t, envOpts{})
	code, body, open := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
	defer open.Close()
	if _, err := open.Write([]byte("ping")); err != nil { // the tunnel is relaying
		t.Fatal(err)
	}
	var buf [4]byte
	if _, err := io.ReadFull(open, buf[:]); err != nil {
		t.Fatal(err)
	}
	e.faults.Arm(fault.ProxyListen, fault.Rule{Kind: fault.KindError, Count: 1})
	if c, err := net.Dial("tcp", e.proxy); err == nil { // accepted, then the listener actor fails
		_ = c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", e.proxy, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, err = fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\nHost: up.test\r\n\r\n", e.echoPort)
			if err == nil {
				var line [12]byte
				_, err = io.ReadFull(c, line[:])
				if err == nil && string(line[:]) == "HTTP/1.1 200" {
					_ = c.Close()
					break
				}
			}
			_ = c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CONNECT served within 5 s of the proxy's restart with a tunnel open (last: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open.Read(buf[:]); err == nil {
		t.Fatal("the tunnel open across the proxy's restart was not cut")
	}
}
