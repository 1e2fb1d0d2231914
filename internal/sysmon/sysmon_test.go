package sysmon

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		want    []string
		changed bool
	}{
		{"no GODEBUG", []string{"A=1"}, []string{"A=1", "GODEBUG=" + Setting}, true},
		{"empty GODEBUG", []string{"GODEBUG=", "A=1"}, []string{"A=1", "GODEBUG=" + Setting}, true},
		{"other settings kept", []string{"GODEBUG=gctrace=1,madvdontneed=1"}, []string{"GODEBUG=gctrace=1,madvdontneed=1," + Setting}, true},
		{"the operator's schedtrace wins", []string{"GODEBUG=schedtrace=0"}, []string{"GODEBUG=schedtrace=0"}, false},
		{"among others", []string{"A=1", "GODEBUG=gctrace=1,schedtrace=1000"}, []string{"A=1", "GODEBUG=gctrace=1,schedtrace=1000"}, false},
		// The runtime does not trim fields: " schedtrace=1000" is no setting
		// to it, so it is none here either.
		{"a spaced field is not schedtrace", []string{"GODEBUG=gctrace=1, schedtrace=1000"}, []string{"GODEBUG=gctrace=1, schedtrace=1000," + Setting}, true},
		{"a lookalike is not schedtrace", []string{"GODEBUG=xschedtrace=1"}, []string{"GODEBUG=xschedtrace=1," + Setting}, true},
		// os/exec keeps the last of duplicate entries (an env built as
		// append(os.Environ(), extra...)): the last counts, and the result
		// has exactly one, so nothing later can shadow it.
		{"the last duplicate opts out", []string{"GODEBUG=gctrace=1", "B=2", "GODEBUG=schedtrace=0"}, []string{"B=2", "GODEBUG=schedtrace=0"}, false},
		{"the last duplicate is extended", []string{"GODEBUG=schedtrace=0", "B=2", "GODEBUG=gctrace=1"}, []string{"B=2", "GODEBUG=gctrace=1," + Setting}, true},
		{"already set", []string{"GODEBUG=" + Setting}, []string{"GODEBUG=" + Setting}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.env)
			got, changed := Env(in)
			if changed != tc.changed || !slices.Equal(got, tc.want) {
				t.Fatalf("Env(%q) = %q, %v; want %q, %v", tc.env, got, changed, tc.want, tc.changed)
			}
			if !slices.Equal(in, tc.env) {
				t.Fatalf("Env changed its argument: %q", in)
			}
		})
	}
}

// childEnv marks the test binary run as TestMain's child.
const childEnv = "SYSMON_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runChild()
		return
	}
	os.Exit(m.Run())
}

// runChild re-execs (as `boundary serve` does), says its pid and GODEBUG,
// and idles until its stdin closes.
func runChild() {
	if err := Reexec(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	fmt.Printf("%d %s %s\n", os.Getpid(), strings.TrimSpace(string(comm)), os.Getenv("GODEBUG"))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestReexecKeepsSysmonAwake runs a real process through Reexec: it keeps
// its pid and arguments, gets the setting, and its threads then wake about
// every 10 ms while idle (sysmon out of deep sleep), where a process the
// operator opted out (GODEBUG=schedtrace=0) is not re-executed and stays
// quiet. The wake-ups are what the setting is for; if a Go release changed
// what schedtrace does to sysmon, this test says so.
func TestReexecKeepsSysmonAwake(t *testing.T) {
	awake := runAndCount(t, nil)
	if awake.godebug != Setting {
		t.Fatalf("child's GODEBUG after Reexec = %q, want %q", awake.godebug, Setting)
	}
	quiet := runAndCount(t, []string{"GODEBUG=schedtrace=0"})
	if quiet.godebug != "schedtrace=0" {
		t.Fatalf("opted-out child's GODEBUG = %q, want it left as schedtrace=0", quiet.godebug)
	}
	t.Logf("idle wake-ups in %s: with the setting %d, opted out %d", window, awake.wakes, quiet.wakes)
	// Expected about 200 and about 0; the bounds leave room for a VM that
	// delays timers (40 is one wake-up per 50 ms).
	if awake.wakes < 40 || awake.wakes < 4*quiet.wakes {
		t.Errorf("idle wake-ups in %s: %d with %s, %d with GODEBUG=schedtrace=0; want >= 40 and >= 4x the other (sysmon every 10 ms against deep sleep)",
			window, awake.wakes, Setting, quiet.wakes)
	}
}

const window = 2 * time.Second

type childRun struct {
	godebug string
	wakes   int64
}

func runAndCount(t *testing.T, extra []string) childRun {
	t.Helper()
	env := []string{childEnv + "=1", "PATH=" + os.Getenv("PATH")}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(env, extra...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child said nothing: %v", err)
	}
	fields := strings.SplitN(strings.TrimSpace(line), " ", 3)
	if len(fields) < 2 {
		t.Fatalf("child said %q", line)
	}
	if pid, _ := strconv.Atoi(fields[0]); pid != cmd.Process.Pid {
		t.Fatalf("child reports pid %s, started as %d: Reexec must replace the process in place", fields[0], cmd.Process.Pid)
	}
	// The kernel names a process after the file it execs (15 bytes at
	// most): a re-exec through /proc/self/exe would make it "exe".
	if want := filepath.Base(os.Args[0]); fields[1] != want[:min(len(want), 15)] {
		t.Fatalf("child's name after Reexec is %q, want %q (what it was started as)", fields[1], want)
	}
	godebug := ""
	if len(fields) == 3 {
		godebug = fields[2]
	}
	// Let start-up settle (the runtime's first GCs, thread creation).
	time.Sleep(300 * time.Millisecond)
	before := switches(t, cmd.Process.Pid)
	time.Sleep(window)
	return childRun{godebug: godebug, wakes: switches(t, cmd.Process.Pid) - before}
}

// switches sums the voluntary context switches of a process's threads.
func switches(t *testing.T, pid int) int64 {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of %d: %v", pid, err)
	}
	var n int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that exited
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}
