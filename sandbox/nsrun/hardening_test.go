package nsrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy"
)

// specIn is bashSpec (the tests' sandbox) running script on workspace ws
// with filesystem policy fs.
func specIn(t *testing.T, ws, script string, fs Filesystem) Spec {
	t.Helper()
	spec := bashSpec(t, script)
	spec.Workspace, spec.Filesystem = ws, fs
	return spec
}

// mountOptions returns the per-mount options of each mount point in a
// /proc/self/mountinfo text.
func mountOptions(mountinfo string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 {
			out[f[4]] = f[5]
		}
	}
	return out
}

func hasOptions(opts string, want ...string) bool {
	have := strings.Split(opts, ",")
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestWritableMountsNoSuidDev plays a workload that leaves a setuid-root
// (sandbox root) program in the workspace for a later, unprivileged
// workload: it runs with the caller's ids, and every mount the workload
// can write in is nosuid,nodev.
func TestWritableMountsNoSuidDev(t *testing.T) {
	needSandbox(t)
	rw := testenv.OpenHostDir(t)
	ws := t.TempDir()
	fs := Filesystem{ReadOnly: append(baseReadOnly(), "/proc"), ReadWrite: []string{WorkspaceMount, "/tmp", "/dev/shm", rw}, Mode: HardRequirement}
	run(t, specIn(t, ws, "cp /usr/bin/id /sandbox/suid-id && chmod 4755 /sandbox/suid-id", fs))
	fi, err := os.Stat(filepath.Join(ws, "suid-id"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the workload's setuid program: %v %v", fi, err)
	}
	spec := specIn(t, ws, "/sandbox/suid-id -u > /sandbox/euid; cat /proc/self/mountinfo > /sandbox/mountinfo", fs)
	spec.RunAsUser, spec.RunAsGroup = 1000, 1000
	run(t, spec)
	if got := readWS(t, spec, "euid"); got != "1000" {
		t.Errorf("the setuid program ran with euid %s, want 1000", got)
	}
	opts := mountOptions(readWS(t, spec, "mountinfo"))
	for _, m := range []string{WorkspaceMount, "/tmp", "/var/tmp", "/dev/shm", "/run", "/dev", rw} {
		if !hasOptions(opts[m], "nosuid", "nodev") {
			t.Errorf("%s is mounted %q, want nosuid,nodev", m, opts[m])
		}
	}
}

// TestWorkloadLinkNotFollowed plays a workload that replaces a read_write
// path of its policy by a link to a directory its policy gives it only to
// read, for its next start (or a later exec) to grant it write access
// there: the link is not followed (a warning in best_effort, a failed start
// naming the path in hard_requirement) and the directory stays untouched.
func TestWorkloadLinkNotFollowed(t *testing.T) {
	needSandbox(t)
	target := testenv.OpenHostDir(t)
	ws := t.TempDir()
	fs := Filesystem{
		ReadOnly:  append(baseReadOnly(), target),
		ReadWrite: []string{WorkspaceMount, "/sandbox/cache"},
		Mode:      BestEffort,
	}
	plant := fmt.Sprintf("rm -rf /sandbox/cache && ln -s %s /sandbox/cache", target)
	run(t, specIn(t, ws, plant, fs))
	if l, err := os.Readlink(filepath.Join(ws, "cache")); err != nil || l != target {
		t.Fatalf("the planted link: %q %v", l, err)
	}

	attack := "if { echo pwned > /sandbox/cache/pwned; } 2>/dev/null; then echo written; else echo refused; fi > /sandbox/result"
	spec := specIn(t, ws, attack, fs)
	sb := run(t, spec)
	if got := readWS(t, spec, "result"); got != "refused" {
		t.Errorf("writing through the link at the next start: %s", got)
	}
	untouched(t, target)
	want := "filesystem_policy read_write /sandbox/cache skipped: /sandbox/cache is a symbolic link in a directory the workload can write (/sandbox)"
	if w := strings.Join(sb.Warnings(), "\n"); !strings.Contains(w, want) {
		t.Errorf("best_effort warnings %q, want %q", w, want)
	}

	hard := fs
	hard.Mode = HardRequirement
	started, err := Start(context.Background(), specIn(t, ws, "exec sleep 1000", hard))
	if err == nil {
		_ = started.Close()
	}
	if err == nil || !errors.Is(err, ErrCannotStart) || !strings.Contains(err.Error(), "read_write /sandbox/cache: /sandbox/cache is a symbolic link") {
		t.Errorf("hard_requirement Start error %v, want a permanent refusal naming /sandbox/cache", err)
	}

	t.Run("exec", func(t *testing.T) {
		// The link made while the sandbox runs, in its /tmp, for the next
		// exec: the exec'd process gets no write access through it.
		spec := specIn(t, t.TempDir(), "mkdir /tmp/cache; exec sleep 1000",
			Filesystem{ReadOnly: append(baseReadOnly(), target), ReadWrite: []string{WorkspaceMount, "/tmp", "/tmp/cache"}, Mode: BestEffort})
		sb := start(t, spec)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		execIn := func(script string) {
			t.Helper()
			p, err := sb.Exec(ctx, ExecSpec{Argv: []string{"/bin/bash", "-c", script}})
			if err != nil {
				t.Fatalf("exec %q: %v", script, err)
			}
			if _, err := p.Wait(); err != nil {
				t.Fatalf("exec %q: %v", script, err)
			}
		}
		execIn(fmt.Sprintf("rmdir /tmp/cache && ln -s %s /tmp/cache", target))
		execIn("if { echo pwned > /tmp/cache/pwned; } 2>/dev/null; then echo written; else echo refused; fi > /sandbox/result")
		if got := readWS(t, spec, "result"); got != "refused" {
			t.Errorf("an exec writing through the link: %s", got)
		}
		untouched(t, target)
	})
}

// untouched fails the test if dir holds anything.
func untouched(t *testing.T, dir string) {
	t.Helper()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("%s, which the policy only lets the workload read, holds %v (%v)", dir, ents, err)
	}
}

// TestCompatPoliciesStart: every OpenShell policy of the compatibility set
// starts a shell that reads through the system's own links (/lib ->
// usr/lib on a merged-/usr host, /proc/self) with the baseline, and none of
// its paths is refused as a workload's link.
func TestCompatPoliciesStart(t *testing.T) {
	needSandbox(t)
	files, err := filepath.Glob("../../policy/testdata/compat/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no compatibility policies: %v", err)
	}
	base := policy.Baseline()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			pol, err := policy.Parse(file, b)
			if err != nil {
				t.Fatal(err)
			}
			// As the supervisor builds it.
			fs := Filesystem{BaselineReadOnly: base.ReadOnly, BaselineReadWrite: base.ReadWrite}
			if f := pol.Filesystem; f != nil {
				fs.ReadOnly, fs.ReadWrite, fs.IncludeWorkdir = f.ReadOnly, f.ReadWrite, f.IncludeWorkdir
			}
			if pol.Landlock.Compatibility == policy.HardRequirement {
				fs.Mode = HardRequirement
			}
			spec := specIn(t, t.TempDir(), "ls /lib/ /bin/sh /proc/self/ > /dev/null && echo x > /tmp/x && echo ok > /sandbox/ok", fs)
			sb := run(t, spec)
			if got := readWS(t, spec, "ok"); got != "ok" {
				t.Errorf("the workload wrote %q", got)
			}
			for _, w := range sb.Warnings() {
				if strings.Contains(w, errWorkloadLink.Error()) {
					t.Errorf("a system path refused: %s", w)
				}
			}
			t.Logf("warnings: %q", sb.Warnings())
		})
	}
}

// TestWholeHostViewMounts: a policy listing / sees the host's top-level
// directories; the one holding a read-write path is nosuid,nodev, the
// host's /dev only nosuid (its device nodes still work), the rest as the
// host has them.
func TestWholeHostViewMounts(t *testing.T) {
	needSandbox(t)
	rw := testenv.OpenHostDir(t)
	spec := specIn(t, t.TempDir(), "echo x > /dev/null && echo y > "+rw+"/f && cat /proc/self/mountinfo > /sandbox/mountinfo",
		Filesystem{ReadOnly: []string{"/"}, ReadWrite: []string{WorkspaceMount, "/dev/null", rw}, Mode: HardRequirement})
	run(t, spec)
	if b, err := os.ReadFile(filepath.Join(rw, "f")); err != nil || string(b) != "y\n" {
		t.Fatalf("the read-write path: %q %v", b, err)
	}
	opts := mountOptions(readWS(t, spec, "mountinfo"))
	top := "/" + strings.Split(rw, "/")[1] // /var
	for m, want := range map[string][2]bool{top: {true, true}, "/dev": {true, false}, WorkspaceMount: {true, true}} {
		have := strings.Split(opts[m], ",")
		if slices.Contains(have, "nosuid") != want[0] || slices.Contains(have, "nodev") != want[1] {
			t.Errorf("%s is mounted %q; want nosuid %v, nodev %v", m, opts[m], want[0], want[1])
		}
	}
	var host unix.Statfs_t
	if err := unix.Statfs("/usr", &host); err != nil {
		t.Fatal(err)
	}
	if hostNoSuid := host.Flags&unix.ST_NOSUID != 0; slices.Contains(strings.Split(opts["/usr"], ","), "nosuid") != hostNoSuid {
		t.Errorf("/usr is mounted %q inside; the host's nosuid is %v", opts["/usr"], hostNoSuid)
	}
}
