package nsrun

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/linelimit"
)

// The test binary re-run as a separate supervisor process.
const (
	helperEnv          = "NSRUN_TEST_HELPER"
	helperWorkspace    = "NSRUN_TEST_WORKSPACE"
	helperSupervisor   = "supervisor"
	helperUnprivileged = "unprivileged"
)

// helperReport is the one JSON line a helper prints on stdout.
type helperReport struct {
	Error       string     `json:"error,omitempty"`
	InitPid     int        `json:"init_pid,omitempty"`
	OrphanPid   int        `json:"orphan_pid,omitempty"`
	Status      ExitStatus `json:"status"`
	Warnings    []string   `json:"warnings,omitempty"`
	HaveSockets bool       `json:"have_sockets,omitempty"`
	ExecOut     string     `json:"exec_out,omitempty"`
	// Output is what init passed on of the workload's output (Spec.Output).
	Output []string `json:"output,omitempty"`
}

func report(r helperReport) int {
	b, _ := json.Marshal(r)
	os.Stdout.Write(append(b, '\n'))
	if r.Error != "" {
		return 1
	}
	return 0
}

// supervisorHelper starts a sandbox whose workload leaves an orphan
// `sleep 1000` that cleared its parent-death signal (and so is reparented
// to init), reports the orphan's host pid and blocks until killed.
func supervisorHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sb, err := Start(ctx, Spec{
		Argv: []string{"/bin/bash", "-c",
			"(setpriv --pdeathsig clear -- sleep 1000 &); exec sleep 999"},
		Workspace:  os.Getenv(helperWorkspace),
		HostIDBase: testIDBase,
		Filesystem: Filesystem{ReadOnly: baseReadOnly()},
	})
	if err != nil {
		return report(helperReport{Error: err.Error()})
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		pids, err := sb.Pids()
		if err != nil {
			return report(helperReport{Error: err.Error()})
		}
		for _, pid := range pids {
			if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cmd) == "sleep\x001000\x00" {
				report(helperReport{InitPid: sb.InitPid(), OrphanPid: pid})
				select {} // until SIGKILL
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return report(helperReport{Error: "orphan sleep not found within 5s"})
}

// unprivilegedHelper runs as an unprivileged user: a sandbox whose
// workload (uid 1000 inside) records its ids and uid map, prints a line on
// each stream (passed on by init, within a line rate), then waits for an
// exec'd process that prints its uid and its pid as the host's kill finds
// it.
func unprivilegedHelper() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stdin, hold, err := os.Pipe()
	if err != nil {
		return report(helperReport{Error: err.Error()})
	}
	sink := newRecordSink()
	sb, err := Start(ctx, Spec{
		Argv: []string{"/bin/bash", "-c",
			"id -u > /sandbox/uid; id -g > /sandbox/gid; cat /proc/self/uid_map > /sandbox/uid_map; grep CapEff /proc/self/status > /sandbox/capeff; cat /proc/sys/user/max_inotify_instances > /sandbox/inotify; : > /sandbox/made; " +
				"echo out from $(id -u); echo err from $(id -u) >&2; seq 1 1000; exec cat"},
		Workspace:  os.Getenv(helperWorkspace),
		RunAsUser:  1000,
		RunAsGroup: 1000,
		Filesystem: Filesystem{ReadOnly: append(baseReadOnly(), "/proc"), ReadWrite: []string{WorkspaceMount}},
		Stdin:      stdin,
		Output:     &Output{Limits: linelimit.Limits{LinesPerSec: 10, Burst: 5}, Sink: sink},
	})
	stdin.Close()
	if err != nil {
		return report(helperReport{Error: err.Error()})
	}
	defer sb.Close()
	execOut, err := execReport(ctx, sb)
	hold.Close()
	if err != nil {
		return report(helperReport{Error: err.Error()})
	}
	proxy, udp, tcp, diag := sb.Listeners()
	haveSockets := proxy != nil && udp != nil && tcp != nil && diag >= 0
	st, err := sb.Wait()
	if err != nil {
		return report(helperReport{Error: err.Error()})
	}
	if err := sb.Close(); err != nil {
		return report(helperReport{Error: err.Error()})
	}
	out, c := sink.got(Stdout)
	errs, _ := sink.got(Stderr)
	output := append(append(out, errs...), fmt.Sprintf("dropped %d over the line rate", c[linelimit.OverLines]))
	return report(helperReport{Status: st, Warnings: sb.Warnings(), HaveSockets: haveSockets,
		ExecOut: execOut, Output: output})
}

// execReport execs `id -u; cat` in sb and returns its uid and whether
// the host sees its Pid as a process of the sandbox ("1000 host-pid").
func execReport(ctx context.Context, sb *Sandbox) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	in, hold, err := os.Pipe()
	if err != nil {
		w.Close()
		return "", err
	}
	defer hold.Close()
	p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"sh", "-c", "id -u; exec cat"}, Stdin: in, Stdout: w})
	w.Close()
	in.Close()
	if err != nil {
		return "", err
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("exec output: %w", err)
	}
	pids, err := sb.Pids()
	if err != nil {
		return "", err
	}
	where := "not-in-sandbox"
	if slices.Contains(pids, p.Pid()) {
		where = "host-pid"
	}
	hold.Close()
	if st, err := p.Wait(); err != nil || !st.Success() {
		return "", fmt.Errorf("exec'd process: %s %v", st, err)
	}
	return strings.TrimSpace(line) + " " + where, nil
}

// runHelper starts the test binary as a helper (exec'd through a
// descriptor, so an unprivileged cred needs no access to its directory)
// and returns it with its first report line.
func runHelper(t *testing.T, mode, workspace string, cred *syscall.Credential) (*exec.Cmd, helperReport) {
	t.Helper()
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	cmd := &exec.Cmd{
		Path:        "/proc/self/fd/3",
		Args:        []string{"nsrun-test-helper", "-test.run=^$"},
		Env:         []string{helperEnv + "=" + mode, helperWorkspace + "=" + workspace, "PATH=/usr/bin:/bin"},
		Dir:         "/",
		ExtraFiles:  []*os.File{exe},
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Credential: cred},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(15 * time.Second):
		t.Fatal("helper reported nothing within 15s")
	}
	var r helperReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &r); err != nil {
		t.Fatalf("helper report %q: %v", line, err)
	}
	return cmd, r
}
