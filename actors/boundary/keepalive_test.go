package boundary_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tcpTimer reads, from /proc/net/tcp, the timer of the one socket whose
// remote port is port (the boundary's upstream socket of a tunnel to it):
// "tr" (0 none, 1 retransmit, 2 keep-alive, ...) and the seconds to its
// expiry. ok is false when no such socket is open.
func tcpTimer(t *testing.T, port int) (tr int, secs float64, ok bool) {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local rem st tx:rx tr:when ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || !strings.HasSuffix(fs[2], want) || fs[3] != "01" {
			continue
		}
		trWhen := strings.SplitN(fs[5], ":", 2)
		tr, _ = strconv.Atoi(trWhen[0])
		jiffies, _ := strconv.ParseInt(trWhen[1], 16, 64)
		return tr, float64(jiffies) / 100, true // USER_HZ
	}
	return 0, 0, false
}

// TestUpstreamKeepAliveAfterASweep: a tunnel's upstream connection is
// dialed without TCP keep-alive (two system calls a short tunnel does not
// need), and a tunnel that lives through a sweep period gets it: its
// socket's keep-alive timer is armed, the first probe after 15 s idle.
// The kernel's own view (/proc/net/tcp), not the boundary's.
func TestUpstreamKeepAliveAfterASweep(t *testing.T) {
	t.Run("dialed without", func(t *testing.T) {
		if tr, _, ok := upstreamTimer(t, time.Hour, false, 0); !ok {
			t.Fatalf("upstream socket: timer %d, want none: keep-alive set at the dial", tr)
		}
	})
	t.Run("on after a sweep", func(t *testing.T) {
		// Between SO_KEEPALIVE and TCP_KEEPIDLE the timer is the kernel's
		// default (2 h): the wait goes on until it is 15 s.
		tr, secs, ok := upstreamTimer(t, 30*time.Millisecond, false, 2)
		if !ok {
			t.Fatalf("upstream socket: timer %d in %.2f s 5 s into the tunnel, want keep-alive (2) in about 15 s", tr, secs)
		}
	})
	t.Run("a plain request's too", func(t *testing.T) {
		// An upstream that never answers a plain HTTP request: the relay
		// waits on it, and only keep-alive would find it gone.
		tr, secs, ok := upstreamTimer(t, 30*time.Millisecond, true, 2)
		if !ok {
			t.Fatalf("upstream socket: timer %d in %.2f s 5 s into the request, want keep-alive (2) in about 15 s", tr, secs)
		}
	})
}

// upstreamTimer opens a tunnel to hold.test (plain: sends a plain HTTP
// request to it, which it never answers) through a boundary sweeping
// every sweep and waits up to 5 s for its upstream socket's timer to be
// want (for keep-alive, 2, due in about 15 s); ok is false if it never was
// (tr and secs are the last seen).
func upstreamTimer(t *testing.T, sweep time.Duration, plain bool, want int) (tr int, secs float64, ok bool) {
	e := startEnv(t, envOpts{sweep: sweep})
	if plain {
		c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://hold.test:%d/ HTTP/1.1\r\nHost: hold.test:%d\r\n\r\n", e.holdPort, e.holdPort)
	} else {
		code, body, c := e.connect(t, "hold.test", e.holdPort)
		if code != 200 {
			t.Fatalf("CONNECT: %d %s", code, body)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr, secs, open := tcpTimer(t, e.holdPort)
		if open && tr == want && (want != 2 || secs > 10 && secs <= 16) {
			return tr, secs, true
		}
		if time.Now().After(deadline) {
			return tr, secs, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
