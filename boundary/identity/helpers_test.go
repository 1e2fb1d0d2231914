package identity

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unavailable skips outside CI and fails in CI (CI must run every test).
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("cannot run in CI: "+format, args...)
	}
	tb.Skipf(format, args...)
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		unavailable(tb, "needs root")
	}
}

// realPath resolves symlinks the way /proc/<pid>/exe reports a binary.
func realPath(tb testing.TB, p string) string {
	tb.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		tb.Fatalf("resolve %s: %v", p, err)
	}
	return r
}

func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(tb, "%s not installed: %v", name, err)
	}
	return realPath(tb, p)
}

func selfExe(tb testing.TB) string {
	tb.Helper()
	p, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return realPath(tb, p)
}

func listen(tb testing.TB, network, addr string) net.Listener {
	tb.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		tb.Fatalf("listen %s %s: %v", network, addr, err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// accept waits (bounded) for one connection on ln.
func accept(tb testing.TB, ln net.Listener) net.Conn {
	tb.Helper()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		tb.Fatalf("accept: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// pair makes a loopback connection from this process; it returns the
// accepted (proxy-side) conn.
func pair(tb testing.TB, ln net.Listener) net.Conn {
	tb.Helper()
	c, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return accept(tb, ln)
}

// ends returns the accepted conn's local (proxy) and remote (client) ends.
func ends(c net.Conn) (local, remote netip.AddrPort) {
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
}

func port(ln net.Listener) string {
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// chainScript: level N runs level N-1 as a child (bash never execs the
// command of a script file in place); level 1 connects to 127.0.0.1:PORT
// with fd 3, prints its pid and waits for stdin to close.
const chainScript = `if [ "$1" -gt 1 ]; then
  bash "$0" $(( $1 - 1 )) "$2"
  exit $?
fi
exec 3<>/dev/tcp/127.0.0.1/$2
echo $$
read -r _
`

// chain starts depth nested bash processes; the leaf holds a connection to
// ln. It returns the accepted conn and the leaf's pid. Everything is torn
// down at cleanup.
func chain(tb testing.TB, ln net.Listener, depth int) (net.Conn, int) {
	tb.Helper()
	bash := lookPath(tb, "bash")
	script := filepath.Join(tb.TempDir(), "chain.sh")
	if err := os.WriteFile(script, []byte(chainScript), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bash, script, strconv.Itoa(depth), port(ln))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start chain: %v", err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	conn := accept(tb, ln)
	pidc := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		pidc <- line
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-pidc:
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			tb.Fatalf("chain leaf pid %q: %v", line, err)
		}
		return conn, pid
	case <-time.After(10 * time.Second):
		tb.Fatal("chain leaf did not report its pid")
	}
	return nil, 0
}
