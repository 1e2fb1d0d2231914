package chaos

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestProxyCutAndHeal: the etcd link proxy forwards; a cut closes its
// connections and refuses new ones; after heal it forwards again.
func TestProxyCutAndHeal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := newProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	addr := strings.TrimPrefix(p.URL(), "http://")
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && line != "ping\n" {
			t.Fatalf("echo through the proxy: %q", line)
		}
		return err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(c); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	if n := p.cutLink(); n != 1 {
		t.Errorf("cut closed %d connections, want 1", n)
	}
	if err := echo(c); err == nil {
		t.Fatal("a connection survived the cut")
	}
	_ = c.Close()
	if c2, err := net.Dial("tcp", addr); err == nil {
		if echo(c2) == nil {
			t.Fatal("a new connection was forwarded while cut")
		}
		_ = c2.Close()
	}
	p.heal()
	c3, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := echo(c3); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}
