package logfile

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// readLog reads a log file ("" when it does not exist).
func readLog(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestRotatingFileBoundsTheLog: 40 lines of 25 bytes into a file rotated
// at 100 bytes keeping 2: no file is over 100 bytes, FILE.3 never
// appears, and FILE.2, FILE.1, FILE hold the last lines in order (each
// whole: a line that does not fit starts the next file).
func TestRotatingFileBoundsTheLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "supervisor.log")
	r, err := OpenRotating(p, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var all []string
	for i := range 40 {
		l := fmt.Sprintf("line %03d of the log....\n", i) // 25 bytes
		all = append(all, l)
		if n, err := r.Write([]byte(l)); err != nil || n != len(l) {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	var kept string
	for _, f := range []string{p + ".2", p + ".1", p} {
		s := readLog(t, f)
		if len(s) == 0 || len(s) > 100 || !strings.HasSuffix(s, "\n") {
			t.Fatalf("%s: %d bytes %q, want 1..100 bytes of whole lines", f, len(s), s)
		}
		kept += s
	}
	if _, err := os.Stat(p + ".3"); !os.IsNotExist(err) {
		t.Fatalf("%s.3 exists (stat: %v): only 2 rotated files are kept", p, err)
	}
	if want := strings.Join(all[len(all)-12:], ""); kept != want {
		t.Fatalf("the files hold\n%s\nwant the last 12 lines\n%s", kept, want)
	}
	// A line longer than the size gets a file of its own.
	long := strings.Repeat("x", 150) + "\n"
	if _, err := r.Write([]byte(long)); err != nil {
		t.Fatal(err)
	}
	if s := readLog(t, p); s != long {
		t.Fatalf("after a long line the file holds %q", s)
	}
}

// TestRotatingFileFollowsDescriptors: a followed descriptor (a process's
// stderr, here a descriptor of the test's own) is the current file from
// the start and after every rotation, so what is written to it directly
// (the runtime's crash report) never lands in a rotated file.
func TestRotatingFileFollowsDescriptors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "supervisor.log")
	fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	r, err := OpenRotating(p, 64, 1, fd)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	direct := func(s string) {
		t.Helper()
		if _, err := unix.Write(fd, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	direct("direct 1\n")
	if s := readLog(t, p); s != "direct 1\n" {
		t.Fatalf("the followed descriptor wrote %q into the log, want it to be the log", s)
	}
	if _, err := r.Write([]byte(strings.Repeat("a", 60) + "\n")); err != nil { // rotates: 9 + 61 > 64
		t.Fatal(err)
	}
	direct("direct 2\n")
	if s := readLog(t, p); s != strings.Repeat("a", 60)+"\ndirect 2\n" {
		t.Fatalf("after a rotation the current file holds %q; the descriptor must follow it", s)
	}
	if s := readLog(t, p+".1"); s != "direct 1\n" {
		t.Fatalf("%s.1 holds %q, want the first file", p, s)
	}
}

// Environment of TestRotatingFileCrashReport's child.
const (
	crashLogEnv  = "STOCKADE_LOGFILE_TEST_CRASH_LOG"
	crashModeEnv = "STOCKADE_LOGFILE_TEST_CRASH_MODE"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(crashLogEnv); p != "" {
		crashChild(p, os.Getenv(crashModeEnv))
	}
	os.Exit(m.Run())
}

// crashChild logs through a RotatingFile that follows its stdout and
// stderr, past a rotation, then ends as a supervisor may: a panic (the
// runtime's report on stderr) or a last line on stderr and exit 1.
func crashChild(p, mode string) {
	r, err := OpenRotating(p, 1000, 2, 1, 2)
	if err != nil {
		os.Exit(3)
	}
	for i := range 50 {
		fmt.Fprintf(r, `{"level":"info","msg":"line %d of the child's log, some padding"}`+"\n", i)
	}
	if mode == "panic" {
		panic("the supervisor's crash")
	}
	fmt.Fprintln(os.Stderr, "stockade: the reason it ended")
	os.Exit(1)
}

// TestRotatingFileCrashReport: a process whose log rotated (several times)
// panics, or prints its last line and exits: the runtime's crash report,
// or that line, is at the end of the current file, where the gateway's
// driver reads a supervisor's last line.
func TestRotatingFileCrashReport(t *testing.T) {
	for mode, want := range map[string]string{"panic": "panic: the supervisor's crash", "exit": "stockade: the reason it ended"} {
		t.Run(mode, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "supervisor.log")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashLogEnv+"="+p, crashModeEnv+"="+mode)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if err == nil || out.Len() != 0 {
				t.Fatalf("child: %v, wrote %q to the stdio it was started with (want all in its log)", err, out.String())
			}
			if _, err := os.Stat(p + ".2"); err != nil {
				t.Fatalf("the log did not rotate twice: %v", err)
			}
			cur := readLog(t, p)
			if mode == "exit" {
				lines := strings.Split(strings.TrimSpace(cur), "\n")
				if last := lines[len(lines)-1]; last != want {
					t.Fatalf("the current log ends with %q, want %q:\n%s", last, want, cur)
				}
			} else if !strings.Contains(cur, want) || !strings.Contains(cur, "goroutine ") {
				t.Fatalf("the current log has no crash report (%q):\n%s", want, cur)
			}
			for _, old := range []string{p + ".1", p + ".2"} {
				if s := readLog(t, old); strings.Contains(s, want) {
					t.Fatalf("%s holds the end (%q): it went to a rotated file", old, want)
				}
			}
		})
	}
}

// TestShiftStopsRatherThanOverwrite: when an older file cannot move (its
// next name is taken by a directory), Shift fails and leaves every file
// where it was: a younger one never replaces it.
func TestShiftStopsRatherThanOverwrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.log")
	for name, body := range map[string]string{"x.log": "live", "x.log.1": "one", "x.log.2": "two"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "x.log.3", "taken"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Shift(p, 3); err == nil {
		t.Fatal("Shift succeeded with x.log.3 taken by a directory")
	}
	for name, want := range map[string]string{"x.log": "live", "x.log.1": "one", "x.log.2": "two"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", name, b, err, want)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, "x.log.3")); err != nil {
		t.Fatal(err)
	}
	if err := Shift(p, 3); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"x.log.1": "live", "x.log.2": "one", "x.log.3": "two"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("after the way is clear, %s: %q %v, want %q", name, b, err, want)
		}
	}
}
