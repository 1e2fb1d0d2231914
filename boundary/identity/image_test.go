package identity

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// puppetScript connects to 127.0.0.1:$0 on fd 3, prints its pid, then
// runs each line it reads (eval) and says "ok": the test makes it exec,
// fork or exit while it holds the connection.
const puppetScript = `exec 3<>/dev/tcp/127.0.0.1/$0
echo $$
while read -r cmd; do eval "$cmd"; echo ok; done`

// puppet is a bash process holding a connection to the test's listener.
type puppet struct {
	pid  int
	conn net.Conn // the accepted (proxy) end
	in   io.WriteCloser
	out  *bufio.Reader
	cmd  *exec.Cmd
}

// startPuppet starts a puppet (in its own process group) connected to ln,
// with env added to its environment.
func startPuppet(t *testing.T, ln net.Listener, env ...string) *puppet {
	t.Helper()
	cmd := exec.Command(lookPath(t, "bash"), "-c", puppetScript, port(ln))
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &puppet{conn: accept(t, ln), in: in, out: bufio.NewReader(stdout), cmd: cmd}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if p.pid, err = strconv.Atoi(p.line(t)); err != nil {
		t.Fatalf("puppet pid: %v", err)
	}
	return p
}

// line reads the puppet's next output line (bounded).
func (p *puppet) line(t *testing.T) string {
	t.Helper()
	c := make(chan string, 1)
	go func() {
		l, _ := p.out.ReadString('\n')
		c <- strings.TrimSpace(l)
	}()
	select {
	case l := <-c:
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("the puppet said nothing for 10 s")
		return ""
	}
}

// run makes the puppet run cmd and waits for the line it prints (want).
func (p *puppet) run(t *testing.T, cmd, want string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		t.Fatal(err)
	}
	if got := p.line(t); got != want {
		t.Fatalf("puppet ran %q and said %q, want %q", cmd, got, want)
	}
}

// group lists the puppet's process group (its descendants).
func (p *puppet) group() ([]int, error) {
	pids, err := newProcFS("/proc", 0).allPids()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range pids {
		if pg, err := syscall.Getpgid(pid); err == nil && pg == p.pid {
			out = append(out, pid)
		}
	}
	return out, nil
}

// execOf reads pid's Exec as the resolver's table does.
func execOf(t *testing.T, pid int) Exec {
	t.Helper()
	tbl := newProcTable("/proc")
	h, err := tbl.acquire(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.release(h, true)
	e, err := h.readExec()
	if err != nil || !e.Known() || e.Code == 0 || e.Stack == 0 {
		t.Fatalf("exec of pid %d: %+v, %v", pid, e, err)
	}
	return e
}

// waitExe waits until pid runs exe.
func waitExe(t *testing.T, pid int, exe string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool {
		got, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		return got == exe
	}, "pid %d to run %s", pid, exe)
}

// TestRecordedExecChanged plays a workload that connects with one
// program and executes another (or the same one again, with something
// preloaded) before the boundary's lookup at accept: the record's Exec,
// taken at the connect, no longer matches the process, and the lookup
// fails with a ChangedError naming the program running now, instead of
// reporting it as the connector (or falling back to sock_diag, which
// would). The record of an unchanged process is used as is.
func TestRecordedExecChanged(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	p := startPuppet(t, ln)
	bash, sleep := lookPath(t, "bash"), lookPath(t, "sleep")
	atConnect := execOf(t, p.pid)
	lookup := func() (Identity, error) {
		rec := &fakeRecords{c: Connector{Pid: p.pid, At: bootTime(t), Exec: atConnect}, ok: true}
		local, remote := ends(p.conn)
		return newResolver(t, WithConnectRecords(rec)).Resolve(context.Background(), local, remote)
	}
	id, err := lookup()
	if err != nil || id.Pid != p.pid || id.Exe != bash || id.Exec != atConnect || id.Socket != 0 {
		t.Fatalf("unchanged connector: %+v, %v; want pid %d %s from the record, Exec %+v", id, err, p.pid, bash, atConnect)
	}
	for _, tc := range []struct{ name, cmd, exe string }{
		{"the same program again", `exec bash -c 'echo execd; while read -r cmd; do eval "$cmd"; echo ok; done'`, bash},
		{"another program", "exec " + sleep + " 30", sleep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.exe == bash {
				p.run(t, tc.cmd, "execd")
			} else {
				_, _ = fmt.Fprintln(p.in, tc.cmd)
			}
			waitExe(t, p.pid, tc.exe)
			id, err := lookup()
			var ch *ChangedError
			if !errors.As(err, &ch) || !errors.Is(err, ErrBinaryChanged) {
				t.Fatalf("after an exec: %+v, %v; want a ChangedError", id, err)
			}
			if ch.Now.Pid != p.pid || ch.Now.Exe != tc.exe || !strings.Contains(ch.Msg, tc.exe) {
				t.Fatalf("change reported %+v %q, want pid %d running %s", ch.Now, ch.Msg, p.pid, tc.exe)
			}
		})
	}
}

// TestRecheck plays workloads that change what is behind a connection
// between its accept and its request's end: the process executes another
// program, forks a child that holds the socket too, exits. Recheck finds
// each (a ChangedError), with and without process events, and nothing
// when nothing changed.
func TestRecheck(t *testing.T) {
	bash, sleep := lookPath(t, "bash"), lookPath(t, "sleep")
	for _, events := range []bool{true, false} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			ln := listen(t, "tcp4", "127.0.0.1:0")
			start := func() (*puppet, *Netlink, Identity) {
				p := startPuppet(t, ln)
				opts := []Option{WithPids(p.group)}
				if !events {
					opts = append(opts, WithoutProcEvents())
				}
				r := newResolver(t, opts...)
				id := resolve(t, r, p.conn)
				if id.Pid != p.pid || id.Exe != bash || !id.Exec.Known() || id.Start == 0 {
					t.Fatalf("lookup at accept: %+v, want pid %d %s with its start and Exec", id, p.pid, bash)
				}
				if err := r.Recheck(context.Background(), id); err != nil {
					t.Fatalf("recheck with nothing changed: %v", err)
				}
				return p, r, id
			}
			changed := func(t *testing.T, r *Netlink, id Identity, want string) {
				t.Helper()
				err := r.Recheck(context.Background(), id)
				var ch *ChangedError
				if !errors.As(err, &ch) || !strings.Contains(ch.Msg, want) {
					t.Fatalf("recheck: %v, want a change saying %q", err, want)
				}
			}
			t.Run("exec", func(t *testing.T) {
				p, r, id := start()
				_, _ = fmt.Fprintln(p.in, "exec "+sleep+" 30")
				waitExe(t, p.pid, sleep)
				changed(t, r, id, fmt.Sprintf("pid %d was %s when the connection was accepted and executed %s", p.pid, bash, sleep))
			})
			t.Run("a new holder", func(t *testing.T) {
				p, r, id := start()
				p.run(t, sleep+" 30 &", "ok")
				var child int
				testenv.Eventually(t, 10*time.Second, func() bool {
					pids, _ := p.group()
					for _, pid := range pids {
						if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == sleep {
							child = pid
						}
					}
					return child != 0
				}, "the puppet's child to run %s", sleep)
				changed(t, r, id, fmt.Sprintf("pid %d (%s) holds the socket since the connection was accepted", child, sleep))
			})
			t.Run("exit", func(t *testing.T) {
				p, r, id := start()
				_, _ = fmt.Fprintln(p.in, "exit")
				_ = p.cmd.Wait()
				changed(t, r, id, fmt.Sprintf("pid %d (%s) exited", p.pid, bash))
			})
		})
	}
}
