package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// deniedConnects sends CONNECTs the policy denies (other.test) through
// proxy from clients goroutines, each waiting for its 403, until stop is
// closed; it returns how many were answered 403.
func deniedConnects(t *testing.T, proxy string, port, clients int, stop <-chan struct{}) func() int64 {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	req := fmt.Sprintf("CONNECT other.test:%d HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", port, port)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write([]byte(req)); err == nil {
					if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && strings.Contains(line, " 403 ") {
						n.Add(1)
					}
				}
				_ = c.Close()
			}
		}()
	}
	return func() int64 { wg.Wait(); return n.Load() }
}

// TestServeScalesGoProcessors: `boundary serve` runs Go code on one
// processor while one client at a time connects, and on all of them again
// under parallel clients (internal/procs); with GOMAXPROCS set by the
// operator it does neither.
func TestServeScalesGoProcessors(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skipf("this machine has %d processor: there is nothing to scale", runtime.NumCPU())
	}
	if v, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skipf("GOMAXPROCS=%s is set in the test's environment, and serve inherits it: the scaler is off", v)
	}
	f := newFixture(t)
	s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream", "--log-level", "debug")

	stop := make(chan struct{})
	wait := deniedConnects(t, s.proxy, f.webPort, 1, stop)
	testenv.Eventually(t, 15*time.Second, func() bool { return s.logHas(`"to":1,`) },
		"serve goes to one processor under one client")
	close(stop)
	if n := wait(); n == 0 {
		t.Fatal("no CONNECT was answered 403: the load never reached the policy")
	}

	stop = make(chan struct{})
	wait = deniedConnects(t, s.proxy, f.webPort, 16, stop)
	testenv.Eventually(t, 15*time.Second, func() bool { return s.logHas(`"from":1,"to":`) },
		"serve goes back to all processors under 16 clients")
	close(stop)
	wait()

	// The operator's GOMAXPROCS wins: the same load for 2 s, no change.
	fixed := serveEnv(t, []string{"GOMAXPROCS=2"}, "--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream", "--log-level", "debug")
	stop = make(chan struct{})
	wait = deniedConnects(t, fixed.proxy, f.webPort, 1, stop)
	time.Sleep(2 * time.Second)
	close(stop)
	if n := wait(); n == 0 {
		t.Fatal("no CONNECT was answered 403 by the fixed serve")
	}
	if fixed.logHas("go processors scaled") {
		t.Fatalf("serve with GOMAXPROCS=2 scaled its processors:\n%s", fixed.p.Log.String())
	}
}
