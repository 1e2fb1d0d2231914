package nsrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"golang.org/x/sys/unix"
)

// execTimeout bounds every Exec and Wait of these tests.
const execTimeout = 10 * time.Second

// sleeperSandbox starts a sandbox whose workload records its hostname and
// sleeps; /proc is readable so that probes can look at themselves.
func sleeperSandbox(t *testing.T) *Sandbox {
	t.Helper()
	spec := bashSpec(t, "hostname > /sandbox/hostname; exec sleep 1000")
	spec.Hostname = "exec-test"
	spec.Filesystem.ReadOnly = append(spec.Filesystem.ReadOnly, "/proc", "/sys")
	sb := start(t, spec)
	testenv.Eventually(t, 5*time.Second, func() bool {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", sb.WorkloadPid()))
		return strings.HasSuffix(exe, "/sleep")
	}, "workload never became sleep")
	return sb
}

// requireWorkload fails unless the workload still runs.
func requireWorkload(t *testing.T, sb *Sandbox) {
	t.Helper()
	select {
	case <-sb.Done():
		st, err := sb.Wait()
		t.Fatalf("workload ended: %s %v", st, err)
	default:
	}
	if pidGone(sb.WorkloadPid()) {
		t.Fatalf("workload pid %d gone", sb.WorkloadPid())
	}
}

// waitProc waits at most execTimeout for p.
func waitProc(t *testing.T, p *Process) ExitStatus {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(execTimeout):
		t.Fatalf("exec'd process %d did not exit within %s", p.Pid(), execTimeout)
	}
	st, err := p.Wait()
	if err != nil {
		t.Fatalf("Process.Wait: %v", err)
	}
	return st
}

// execPiped runs e with pipes on stdout and stderr and returns what the
// process wrote and its exit status.
func execPiped(t *testing.T, sb *Sandbox, e ExecSpec) (stdout, stderr string, st ExitStatus) {
	t.Helper()
	var outs [2]string
	var wg sync.WaitGroup
	var writers [2]*os.File
	for i := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = w
		wg.Go(func() {
			defer r.Close()
			r.SetReadDeadline(time.Now().Add(execTimeout))
			b, _ := io.ReadAll(r)
			outs[i] = string(b)
		})
	}
	e.Stdout, e.Stderr = writers[0], writers[1]
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	p, err := sb.Exec(ctx, e)
	writers[0].Close()
	writers[1].Close()
	if err != nil {
		t.Fatalf("Exec %q: %v", e.Argv, err)
	}
	st = waitProc(t, p)
	wg.Wait()
	return outs[0], outs[1], st
}

// TestExec: processes started in a running sandbox see its namespaces,
// root and confinement, report their own output and status, and neither
// they nor failed Execs disturb the workload.
func TestExec(t *testing.T) {
	needSandbox(t)
	sb := sleeperSandbox(t)

	t.Run("pipes and status", func(t *testing.T) {
		out, errOut, st := execPiped(t, sb, ExecSpec{Argv: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}})
		if out != "hi\n" || errOut != "err\n" || st != (ExitStatus{Code: 3}) {
			t.Fatalf("stdout %q, stderr %q, status %s; want hi, err, exit 3", out, errOut, st)
		}
		requireWorkload(t, sb)
	})

	t.Run("same sandbox", func(t *testing.T) {
		out, errOut, st := execPiped(t, sb, ExecSpec{Argv: []string{"sh", "-c",
			"pwd; hostname; cat /sandbox/hostname; ls /sys/class/net; ls /proc/self/fd | tr '\\n' ' '; echo; echo \"$HTTPS_PROXY $FOO\""},
			Env: []string{"FOO=bar", "HTTPS_PROXY=http://elsewhere"}})
		want := "/sandbox\nexec-test\nexec-test\nlo\n0 1 2 3 \n" + ProxyURL + " bar\n"
		if out != want || !st.Success() {
			t.Fatalf("stdout %q (stderr %q, %s), want %q", out, errOut, st, want)
		}
	})

	t.Run("same confinement", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		defer cancel()
		p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		pid, wl := p.Pid(), sb.WorkloadPid()
		if pid <= 0 || pidGone(pid) {
			t.Fatalf("Pid() = %d, not a live host pid", pid)
		}
		if ppid := procStatus(t, pid, "PPid"); ppid != fmt.Sprint(sb.InitPid()) {
			t.Errorf("parent %s, want init %d", ppid, sb.InitPid())
		}
		for _, ns := range []string{"user", "pid", "net", "mnt", "uts", "ipc"} {
			a, errA := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			b, errB := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", wl, ns))
			if errA != nil || errB != nil || a != b {
				t.Errorf("%s namespace %q (%v), workload's %q (%v)", ns, a, errA, b, errB)
			}
		}
		for _, field := range []string{"Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "SigIgn", "SigBlk"} {
			if a, b := procStatus(t, pid, field), procStatus(t, wl, field); a != b {
				t.Errorf("%s %q, workload's %q", field, a, b)
			}
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if st := waitProc(t, p); st != (ExitStatus{Code: -1, Signal: syscall.SIGTERM}) {
			t.Fatalf("status %s, want signal terminated", st)
		}
		if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("Signal after exit: %v, want os.ErrProcessDone", err)
		}
		requireWorkload(t, sb)
	})

	t.Run("landlock", func(t *testing.T) {
		if sb.LandlockABI() == 0 {
			testenv.Unavailable(t, "no Landlock (warnings %q)", sb.Warnings())
		}
		// /tmp is a 1777 tmpfs: only Landlock stops the write there.
		out, errOut, st := execPiped(t, sb, ExecSpec{Argv: []string{"sh", "-c",
			"for f in /usr/nsrun-probe /tmp/probe /sandbox/probe; do if (echo x > $f) 2>/dev/null; then echo $f allowed; else echo $f denied; fi; done"}})
		want := "/usr/nsrun-probe denied\n/tmp/probe denied\n/sandbox/probe allowed\n"
		if out != want || !st.Success() {
			t.Fatalf("stdout %q (stderr %q, %s), want %q", out, errOut, st, want)
		}
	})

	t.Run("failures", func(t *testing.T) {
		closedR, closedW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		closedR.Close()
		closedW.Close()
		pipeR, pipeW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pipeR.Close()
		defer pipeW.Close()
		for _, tc := range []struct {
			name string
			e    ExecSpec
			want string
		}{
			{"missing binary", ExecSpec{Argv: []string{"/nsrun/no/such/binary"}}, "execve /nsrun/no/such/binary: no such file"},
			{"not in PATH", ExecSpec{Argv: []string{"nsrun-no-such-command"}}, "nsrun-no-such-command: executable not found in PATH"},
			{"workdir", ExecSpec{Argv: []string{"true"}, Workdir: "/nsrun-no-such-dir"}, "workdir /nsrun-no-such-dir: no such file"},
			{"empty argv", ExecSpec{}, "empty Argv"},
			{"ctty without session", ExecSpec{Argv: []string{"true"}, Setctty: true}, "(Setctty) needs Setsid"},
			{"ctty not a terminal", ExecSpec{Argv: []string{"true"}, Stdin: pipeR, Setsid: true, Setctty: true}, "exec stage: start"},
			{"closed descriptor", ExecSpec{Argv: []string{"true"}, Stdout: closedW}, "bad file descriptor"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, err := sb.Exec(context.Background(), tc.e)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					if p != nil {
						p.Signal(syscall.SIGKILL)
					}
					t.Fatalf("Exec error %v, want one containing %q", err, tc.want)
				}
				requireWorkload(t, sb)
			})
		}
		// The channel still works after the failures.
		if out, _, st := execPiped(t, sb, ExecSpec{Argv: []string{"echo", "ok"}}); out != "ok\n" || !st.Success() {
			t.Fatalf("after failures: %q %s", out, st)
		}
	})
	requireWorkload(t, sb)
}

// TestExecPty: a process on a pty slave, in its own session with the
// slave as controlling terminal, sees the window size set on the master.
func TestExecPty(t *testing.T) {
	needSandbox(t)
	sb := sleeperSandbox(t)
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		testenv.Unavailable(t, "open /dev/ptmx: %v", err)
	}
	master := os.NewFile(uintptr(mfd), "ptmx")
	defer master.Close()
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: 33, Col: 101}); err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sh", "-c", "tty; stty size"},
		Stdin: slave, Stdout: slave, Stderr: slave, Setsid: true, Setctty: true})
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	master.SetReadDeadline(time.Now().Add(execTimeout))
	out, err := io.ReadAll(master) // EIO once the last slave descriptor closes
	if err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("read master: %v (got %q)", err, out)
	}
	if st := waitProc(t, p); !st.Success() {
		t.Fatalf("status %s, output %q", st, out)
	}
	lines := strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n")
	if len(lines) < 2 || lines[0] != fmt.Sprintf("/dev/pts/%d", n) || lines[1] != "33 101" {
		t.Fatalf("output %q, want /dev/pts/%d and 33 101", out, n)
	}
	requireWorkload(t, sb)
}

// TestExecConcurrent: 50 Execs at once, each exiting with its own code.
func TestExecConcurrent(t *testing.T) {
	needSandbox(t)
	sb := sleeperSandbox(t)
	const n = 50
	began := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
			defer cancel()
			p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sh", "-c", fmt.Sprintf("exit %d", i%256)}})
			if err != nil {
				errs <- fmt.Errorf("exec %d: %w", i, err)
				return
			}
			select {
			case <-p.Done():
			case <-ctx.Done():
				errs <- fmt.Errorf("exec %d: no exit within %s", i, execTimeout)
				return
			}
			if st, err := p.Wait(); err != nil || st != (ExitStatus{Code: i % 256}) {
				errs <- fmt.Errorf("exec %d: status %s, %v; want exit %d", i, st, err, i%256)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent execs in %s", n, time.Since(began))
	requireWorkload(t, sb)
}

// TestExecEndsWithSandbox: exec'd processes die with the sandbox; no Exec
// once the workload has exited or the sandbox is closed.
func TestExecEndsWithSandbox(t *testing.T) {
	needSandbox(t)
	stdin, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	spec := bashSpec(t, "exec cat")
	spec.Stdin = stdin
	sb := start(t, spec)
	stdin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Close() // the workload exits
	if st := wait(t, sb); !st.Success() {
		t.Fatalf("workload: %s", st)
	}
	if _, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}}); !errors.Is(err, ErrWorkloadExited) {
		t.Fatalf("Exec after the workload's exit: %v, want ErrWorkloadExited", err)
	}
	if pidGone(p.Pid()) {
		t.Fatal("exec'd process died with the workload, before Close")
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); !errors.Is(err, ErrInitExited) {
		t.Fatalf("Wait after Close: %v, want ErrInitExited", err)
	}
	if !pidGone(p.Pid()) {
		t.Fatalf("exec'd process %d alive after Close", p.Pid())
	}
	if _, err := sb.Exec(ctx, ExecSpec{Argv: []string{"true"}}); err == nil {
		t.Fatal("Exec after Close succeeded")
	}
}

// TestExecAbandoned: an Exec whose context ends while init starts the
// process leaves nothing running.
func TestExecAbandoned(t *testing.T) {
	needSandbox(t)
	sb := sleeperSandbox(t)
	abandoned := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i+1)*500*time.Microsecond)
		p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sleep", "999"}})
		cancel()
		switch {
		case err == nil:
			p.Signal(syscall.SIGKILL)
			waitProc(t, p)
		case errors.Is(err, context.DeadlineExceeded):
			abandoned++
		default:
			t.Fatalf("Exec: %v", err)
		}
	}
	t.Logf("%d of 20 Execs gave up waiting", abandoned)
	testenv.Eventually(t, 5*time.Second, func() bool {
		pids, _ := sb.Pids()
		for _, pid := range pids {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cmd) == "sleep\x00999\x00" {
				return false
			}
		}
		return true
	}, "an abandoned exec'd process still runs")
	requireWorkload(t, sb)
}
