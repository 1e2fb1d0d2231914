package nsrun

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestUserNamespaceOwner: as root, the sandbox's user namespace is owned
// by its own base uid (so the kernel charges its per-user counts there,
// not to host root), its processes run as base+id, the caller keeps no
// thread with those credentials, and init has set the per-uid inotify
// limits inside.
func TestUserNamespaceOwner(t *testing.T) {
	needSandbox(t)
	base := uint32(testIDBase)
	spec := bashSpec(t, "cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches > /sandbox/l && mv /sandbox/l /sandbox/limits; exec cat")
	stdin, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	spec.Stdin = stdin
	spec.Filesystem.ReadOnly = append(spec.Filesystem.ReadOnly, "/proc")
	sb := start(t, spec)
	stdin.Close()
	if got := testenv.UserNSOwner(t, sb.InitPid()); got != base {
		t.Errorf("the sandbox's user namespace is owned by uid %d, want its base %d", got, base)
	}
	if got := testenv.UserNSOwner(t, os.Getpid()); got != 0 {
		t.Errorf("the test's own user namespace owner %d", got)
	}
	for _, pid := range []int{sb.InitPid(), sb.WorkloadPid()} {
		if got, want := procStatus(t, pid, "Uid"), strings.TrimSpace(strings.Repeat(fmt.Sprint(base)+" ", 4)); got != want {
			t.Errorf("pid %d: Uid %q, want %q", pid, got, want)
		}
	}
	// No thread of this process keeps the owner's credentials (the one
	// that started init ends a moment after Start returns).
	var kept string
	testenv.Eventually(t, 5*time.Second, func() bool {
		kept = threadsNotRoot(t)
		return kept == ""
	}, "every thread to be root again (%s)", &kept)
	if w := sb.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	want := hostInotifyShare()
	if want.Instances == 0 {
		t.Fatal("no host inotify limits read")
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(spec.Workspace, "limits"))
		return err == nil
	}, "the workload to write its limits")
	got := readWS(t, spec, "limits")
	if f := strings.Fields(got); len(f) != 2 || f[0] != strconv.FormatInt(want.Instances, 10) || f[1] != strconv.FormatInt(want.Watches, 10) {
		t.Errorf("inotify limits inside %q, want %d and %d (half the host's per-user limits)", got, want.Instances, want.Watches)
	}
}

// TestHostIDBaseRequired: as root a spec must name the sandbox's range.
func TestHostIDBaseRequired(t *testing.T) {
	needSandbox(t)
	for _, base := range []uint32{0, 1000, 65535} {
		s := bashSpec(t, "true")
		s.HostIDBase = base
		if _, _, err := s.prepare(); err == nil || !strings.Contains(err.Error(), "HostIDBase") {
			t.Errorf("HostIDBase %d: %v", base, err)
		}
	}
}

// threadsNotRoot lists this process's threads whose uids or gids are not
// all 0.
func threadsNotRoot(t *testing.T) string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // the thread ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") && strings.Join(f[1:], " ") != "0 0 0 0" {
				out = append(out, task.Name()+" "+l)
			}
		}
	}
	return strings.Join(out, "; ")
}

// TestBecomeOwnerAndBack: the thread that makes the user namespace has
// the sandbox's effective ids with its capabilities still effective
// (Go's uid_map write needs them), its real and saved ids still 0; set
// back (as the main thread is), it is root again with its effective
// capabilities restored. The thread is discarded either way.
func TestBecomeOwnerAndBack(t *testing.T) {
	needSandbox(t)
	type view struct{ uid, gid, capEff, capPrm string }
	read := func() view {
		b, err := os.ReadFile("/proc/thread-self/status")
		if err != nil {
			return view{uid: err.Error()}
		}
		var v view
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "Uid:":
				v.uid = strings.Join(f[1:], " ")
			case "Gid:":
				v.gid = strings.Join(f[1:], " ")
			case "CapEff:":
				v.capEff = f[1]
			case "CapPrm:":
				v.capPrm = f[1]
			}
		}
		return v
	}
	got := make(chan [2]view, 1)
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := becomeOwner(testIDBase, testIDBase); err != nil {
			errs <- err
			return
		}
		owner := read()
		if err := becomeRoot(); err != nil {
			errs <- err
			return
		}
		got <- [2]view{owner, read()}
	}()
	var v [2]view
	select {
	case err := <-errs:
		t.Fatal(err)
	case v = <-got:
	}
	b := fmt.Sprint(testIDBase)
	if want := "0 " + b + " 0 " + b; v[0].uid != want || v[0].gid != want || v[0].capEff != v[0].capPrm {
		t.Errorf("as the owner: %+v, want uids and gids %q and every permitted capability effective", v[0], want)
	}
	if v[1].uid != "0 0 0 0" || v[1].gid != "0 0 0 0" || v[1].capEff != v[1].capPrm {
		t.Errorf("set back: %+v, want root with its capabilities", v[1])
	}
}
