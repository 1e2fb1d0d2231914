package identity

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// hostReadOnly is what a host's programs and libraries load from.
func hostReadOnly() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"}
}

// TestTamperedPreload plays a workload that preloads a library of its
// own (from a path it can write) into a process: Tampered names the
// process and the library; a clean process is vouched for; and a
// clean verdict is kept for that exec only: after the process executes
// again with the library preloaded, it is tampered.
func TestTamperedPreload(t *testing.T) {
	dir := t.TempDir()
	lib := testenv.PreloadLib(t, dir)
	ln := listen(t, "tcp4", "127.0.0.1:0")
	policy := TamperPolicy{ReadOnly: hostReadOnly(), Writable: []string{dir}}
	r := newResolver(t, WithTamperCheck(policy))

	clean := startPuppet(t, ln)
	id := resolve(t, r, clean.conn)
	if got, err := r.Tampered(id); got != nil || err != nil {
		t.Fatalf("a clean bash: %+v, %v; want nothing", got, err)
	}
	h := r.proc.t.peek(clean.pid)
	if h == nil {
		t.Fatal("the inspected process's handle is not held")
	}
	r.proc.t.mu.Lock()
	kept := h.hasTamper && h.tamperFor == id.Exec && h.tamperWhy == ""
	r.proc.t.mu.Unlock()
	r.proc.t.release(h, false)
	if !kept {
		t.Fatal("the clean verdict is not kept for the process's exec")
	}

	pre := startPuppet(t, ln, "LD_PRELOAD="+lib)
	pid := resolve(t, r, pre.conn)
	got, err := r.Tampered(pid)
	if err != nil || got == nil || got.Pid != pre.pid || !strings.Contains(got.Why, lib) || !strings.Contains(got.Why, "a path the workload can write") {
		t.Fatalf("bash with %s preloaded: %+v, %v; want it named tampered", lib, got, err)
	}

	// The clean process executes bash again, now with the library: its
	// kept verdict was for the other exec.
	clean.run(t, `LD_PRELOAD=`+lib+` exec bash -c 'echo execd; while read -r cmd; do eval "$cmd"; echo ok; done'`, "execd")
	again := resolve(t, r, clean.conn)
	if again.Exec == id.Exec {
		t.Fatalf("the exec left the same Exec %+v", again.Exec)
	}
	if got, err := r.Tampered(again); err != nil || got == nil || !strings.Contains(got.Why, lib) {
		t.Fatalf("after an exec with %s preloaded: %+v, %v; want tampered", lib, got, err)
	}
	// The identity from before the exec is no longer the process's.
	if got, err := r.Tampered(id); err == nil {
		t.Fatalf("the identity from before the exec: %+v, want an error", got)
	}
}

// TestTamperedOutsideReadOnly: a library mapped from outside every
// read-only path of the policy is not vouched for either, even where no
// writable path covers it; without a tamper policy nothing is judged.
func TestTamperedOutsideReadOnly(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	p := startPuppet(t, ln)
	r := newResolver(t, WithTamperCheck(TamperPolicy{ReadOnly: []string{"/bin"}}))
	got, err := r.Tampered(resolve(t, r, p.conn))
	if err != nil || got == nil || !strings.Contains(got.Why, "outside the sandbox's read-only paths") {
		t.Fatalf("bash's libraries outside the read-only paths: %+v, %v", got, err)
	}
	plain := newResolver(t)
	if got, err := plain.Tampered(resolve(t, plain, p.conn)); got != nil || err != nil {
		t.Fatalf("without a tamper policy: %+v, %v", got, err)
	}
}

// TestTamperedTraced plays a process of the sandbox that traces an
// allowed one (strace stands for it): the traced process is tampered,
// read with the mappings (a first inspection) and, with TracerEveryCall,
// at every call, a kept clean verdict notwithstanding.
func TestTamperedTraced(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		unavailable(t, "strace not installed: %v", err)
	}
	ln := listen(t, "tcp4", "127.0.0.1:0")
	p := startPuppet(t, ln)
	every := newResolver(t, WithTamperCheck(TamperPolicy{ReadOnly: hostReadOnly(), TracerEveryCall: true}))
	id := resolve(t, every, p.conn)
	if got, err := every.Tampered(id); got != nil || err != nil {
		t.Fatalf("untraced: %+v, %v", got, err)
	}
	tracer := exec.Command(strace, "-p", strconv.Itoa(p.pid), "-o", "/dev/null")
	if err := tracer.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracer.Process.Kill(); _ = tracer.Wait() })
	testenv.Eventually(t, 10*time.Second, func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/status")
		n, _ := parseTracerPid(b)
		return n == tracer.Process.Pid
	}, "strace to attach")
	want := "traced by pid " + strconv.Itoa(tracer.Process.Pid)
	if got, err := every.Tampered(id); err != nil || got == nil || !strings.Contains(got.Why, want) {
		t.Fatalf("traced, TracerEveryCall: %+v, %v; want %q", got, err, want)
	}
	once := newResolver(t, WithTamperCheck(TamperPolicy{ReadOnly: hostReadOnly()}))
	if got, err := once.Tampered(resolve(t, once, p.conn)); err != nil || got == nil || !strings.Contains(got.Why, want) {
		t.Fatalf("traced, first inspection: %+v, %v; want %q", got, err, want)
	}
}

// TestJudgeMapping judges maps lines as the kernel writes them.
func TestJudgeMapping(t *testing.T) {
	c := &tamperCheck{readOnly: []string{"/usr", "/opt/tools"}, writable: []string{"/sandbox", "/tmp", "/opt/tools/cache"}}
	exe := Exec{Dev: 0xfd01, Ino: 4242} // fd:01 as unix.Mkdev(0xfd, 0x01)
	for _, tc := range []struct {
		line, want string
	}{
		{"7f00-7f10 r-xp 00000000 fd:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6", ""},
		{"7f00-7f10 r--p 00000000 fd:01 99     /sandbox/data.bin", ""},
		{"7f00-7f10 r-xp 00000000 00:00 0 ", ""},
		{"7f00-7f10 rwxp 00000000 00:00 0      [vdso]", ""},
		{"7f00-7f10 r-xs 00000000 00:01 7      /dev/zero (deleted)", ""},
		{"7f00-7f10 r-xp 00000000 fd:01 4242   /sandbox/bin/tool", ""},
		{"7f00-7f10 r-xp 00000000 fd:01 555    /usr/lib/libssl.so.3 (deleted)", ""},
		{"7f00-7f10 r-xp 00000000 fd:01 12     /opt/tools/bin/x", ""},
		{"7f00-7f10 r-xp 00000000 fd:01 77     /sandbox/libevil.so", "/sandbox/libevil.so, a path the workload can write"},
		{"7f00-7f10 r-xp 00000000 fd:01 77     /sandbox/libevil.so (deleted)", "/sandbox/libevil.so (deleted), a path the workload can write"},
		{"7f00-7f10 r-xp 00000000 00:2a 77     /tmp/x.so", "/tmp/x.so, a path the workload can write"},
		{"7f00-7f10 r-xp 00000000 fd:01 13     /opt/tools/cache/jit.so", "a path the workload can write"},
		{"7f00-7f10 r-xp 00000000 00:01 3      /memfd:loader (deleted)", "memory file (/memfd:loader (deleted))"},
		{"7f00-7f10 r-xs 00000000 00:01 3      /SYSV00000000 (deleted)", "System V shared memory"},
		{"7f00-7f10 r-xp 00000000 fd:01 14     /srv/lib.so", "/srv/lib.so, outside the sandbox's read-only paths"},
		{"7f00-7f10 r-xp 00000000 fd:01 15     /usr/lib/a b.so", ""},
		{"7f00-7f10 r-xp 00000000 fd:01 16     /usrx/lib.so", "outside the sandbox's read-only paths"},
	} {
		got := c.judgeMapping([]byte(tc.line), exe)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.line, got, tc.want)
		}
	}
	// A whole maps file: the first mapping not vouched for.
	maps := "7f00-7f10 r-xp 00000000 fd:01 1234 /usr/lib/libc.so.6\n7f20-7f30 r-xp 00000000 fd:01 77 /tmp/a.so\n7f40-7f50 r-xp 00000000 fd:01 78 /tmp/b.so\n"
	if got := c.judgeMaps([]byte(maps), exe); !strings.Contains(got, "/tmp/a.so") {
		t.Errorf("maps: %q, want /tmp/a.so named", got)
	}
}

// TestParseTracerPid reads a status file's TracerPid.
func TestParseTracerPid(t *testing.T) {
	if n, err := parseTracerPid([]byte("Name:\tcurl\nState:\tS\nTracerPid:\t731\nUid:\t0\n")); n != 731 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := parseTracerPid([]byte("Name:\tcurl\n")); err == nil {
		t.Fatal("a status without TracerPid parsed")
	}
}
