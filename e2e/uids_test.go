package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/store"
)

// The host uid range of each sandbox (findings: every sandbox ran as
// 100000-165535, Debian's first /etc/subuid range, and the root
// supervisor created every user namespace, so the kernel charged each
// sandbox's per-user quotas to host root).

// buildProbe builds testdata/probe into the workspace of s (the workload
// waits for it).
func buildProbe(t *testing.T, s status) {
	t.Helper()
	tmp := filepath.Join(s.Workspace, "probe.tmp")
	if out, err := exec.Command("go", "build", "-o", tmp, "./testdata/probe").CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, filepath.Join(s.Workspace, "probe")); err != nil {
		t.Fatal(err)
	}
}

var heldRE = regexp.MustCompile(`^inotify held=(\d+) errno=(\d+)\n$`)

// held parses the probe's "inotify held=N errno=E".
func held(t *testing.T, line string) (int, syscall.Errno) {
	t.Helper()
	m := heldRE.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("probe output %q", line)
	}
	n, _ := strconv.Atoi(m[1])
	e, _ := strconv.Atoi(m[2])
	return n, syscall.Errno(e)
}

// hostRange parses `get`'s hostIds: one range of the default pool.
func hostRange(t *testing.T, s status) idrange.Range {
	t.Helper()
	r, err := idrange.Parse(s.HostIDs)
	if err != nil || r.Size != idrange.Size {
		t.Fatalf("%s: hostIds %q: %v", s.Name, s.HostIDs, err)
	}
	return r
}

func hostInt(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// procField is a field of /proc/PID/status, its values joined by spaces.
func procField(t *testing.T, pid int, field string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return ""
}

// state is a process's state letter (R, S, T, ...).
func state(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

// signalAs runs kill -SIG PID as a host process of uid:gid (no groups).
func signalAs(t *testing.T, uid uint32, sig string, pid int) (string, error) {
	t.Helper()
	cmd := exec.Command("setpriv", fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups", "--", "/bin/kill", "-"+sig, strconv.Itoa(pid))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSandboxHostIDs plays the two attacks as root: (1) sandboxes
// exhausting their inotify quota, ra as two uids, rb and rc as one, while
// host root and each of them still gets what it is due; (2) a host process
// of uid 100000 signalling a sandbox's workload. Then each sandbox's range
// is its own and survives a stop and start, a supervisor kill and
// recovery, and a gateway restart.
func TestSandboxHostIDs(t *testing.T) {
	testenv.NeedTool(t, "setpriv", "util-linux")
	w := newWorld(t, 0)
	share := hostInt(t, "/proc/sys/fs/inotify/max_user_instances")
	hold := `while [ ! -x /sandbox/probe ]; do sleep 0.1; done
/sandbox/probe inotify > /sandbox/h0 &
setpriv --reuid=1000 --regid=1000 --clear-groups /sandbox/probe inotify > /sandbox/h1000 &
wait`
	var sbs []status
	for _, name := range []string{"ra", "rb", "rc"} {
		script := hold
		if name != "ra" {
			script = `while [ ! -x /sandbox/probe ]; do sleep 0.1; done; exec /sandbox/probe inotify > /sandbox/h0`
		}
		s := w.create(name, script)
		buildProbe(t, s)
		n, errno := held(t, w.file(s, "h0"))
		if n != share/2 || errno != syscall.EMFILE {
			t.Errorf("%s (uid 0 inside) holds %d inotify instances (then errno %d); want %d, half of a host user's %d, then EMFILE", s.Name, n, errno, share/2, share)
		}
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Errorf("host root cannot create an inotify instance while %s holds its limit: %v", s.Name, err)
		} else {
			unix.Close(fd)
		}
		sbs = append(sbs, s)
	}
	n, errno := held(t, w.file(sbs[0], "h1000"))
	if n != share-share/2 || errno != syscall.EMFILE {
		t.Errorf("ra's uid 1000 holds %d (errno %d); want the rest of ra's share, %d", n, errno, share-share/2)
	}
	t.Logf("inotify: each of ra (uid 0), rb, rc holds %d, ra's uid 1000 %d (a host user's limit: %d); host root still creates one", share/2, n, share)

	// Each sandbox's own range, owned user namespace and uids.
	seen := map[idrange.Range]string{}
	for _, s := range sbs {
		r := hostRange(t, s)
		if !idrange.DefaultPool().Holds(r) {
			t.Errorf("%s: %s is not a range of the default pool", s.Name, r)
		}
		for o, name := range seen {
			if o.Overlaps(r) {
				t.Errorf("%s and %s share host ids: %s, %s", s.Name, name, r, o)
			}
		}
		seen[r] = s.Name
		initPid, _ := strconv.Atoi(procField(t, s.WorkloadPid, "PPid"))
		if got := testenv.UserNSOwner(t, initPid); got != r.Base {
			t.Errorf("%s: its user namespace is owned by uid %d, want its base %d", s.Name, got, r.Base)
		}
		if got, want := procField(t, s.WorkloadPid, "Uid"), strings.Repeat(fmt.Sprint(r.Base)+" ", 3)+fmt.Sprint(r.Base); got != want {
			t.Errorf("%s: workload Uid %q, want %q", s.Name, got, want)
		}
	}

	// A host process holding 100000 (the range every sandbox had) can no
	// longer signal a sandbox; one holding the sandbox's base could, which
	// shows the attempt itself works.
	ra := sbs[0]
	out, err := signalAs(t, 100000, "STOP", ra.WorkloadPid)
	if err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("kill -STOP of ra's workload as host uid 100000: %v %s", err, out)
	}
	if st := state(t, ra.WorkloadPid); st == "T" {
		t.Errorf("ra's workload was stopped by uid 100000 (state %s)", st)
	}
	t.Logf("kill -STOP %d as host uid 100000: %v: %s", ra.WorkloadPid, err, strings.TrimSpace(out))
	if out, err := signalAs(t, hostRange(t, ra).Base, "0", ra.WorkloadPid); err != nil {
		t.Errorf("kill -0 as ra's own base uid (the control): %v %s", err, out)
	}
	if s, _ := w.get("ra"); s.Phase != "Ready" || s.WorkloadPid != ra.WorkloadPid {
		t.Errorf("ra after the attempt: %+v", s)
	}

	// The range survives a stop and start, a supervisor kill and its
	// recovery, and a gateway restart.
	rb := sbs[1]
	want := rb.HostIDs
	check := func(how string) {
		t.Helper()
		s := w.waitPhase("rb", "Ready", 60*time.Second, func(s status) bool { return s.WorkloadPid != 0 })
		if s.HostIDs != want {
			t.Errorf("after %s: hostIds %q, want %q", how, s.HostIDs, want)
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", s.WorkloadPid))
		if f := strings.Fields(string(b)); err != nil || len(f) != 3 || f[0] != "0" || f[1] != fmt.Sprint(hostRange(t, s).Base) || f[2] != "65536" {
			t.Errorf("after %s: uid_map %q %v", how, b, err)
		}
	}
	for _, verb := range []string{"stop", "start"} {
		if out, errOut, code := w.cli(verb, "rb"); code != 0 {
			t.Fatalf("%s rb: %d %s%s", verb, code, out, errOut)
		}
	}
	check("stop and start")
	s, _ := w.get("rb")
	if err := syscall.Kill(s.SupervisorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.waitPhase("rb", "Ready", 60*time.Second, func(n status) bool { return n.SupervisorPid != s.SupervisorPid && n.WorkloadPid != 0 })
	check("a supervisor kill and recovery")
	w.killGateway()
	<-w.gwDone
	w.startGateway()
	check("a gateway restart")
}

// TestHostIDsTwoGateways: two gateways with different state dirs on one
// host, one pool of a single range. The second cannot take the first's
// range (its create fails, naming the pool); with the claim gone (as
// after a reboot before the first gateway came back), it can, and then
// the first's sandbox fails closed at its start, naming the other, while
// the other keeps running. Once the other is deleted, it starts.
func TestHostIDsTwoGateways(t *testing.T) {
	pool := idrange.DefaultPool()
	slot := idrange.Range{Base: pool.Base + uint32(rand.IntN(int(pool.Size/idrange.Size)))*idrange.Size, Size: idrange.Size}
	flag := []string{"--uid-pool", slot.String()}
	w1, w2 := newWorld(t, 0, flag...), newWorld(t, 0, flag...)
	x := w1.create("x", "exec sleep 1000")
	if x.HostIDs != slot.String() {
		t.Fatalf("x: hostIds %q, want the pool's one range %s", x.HostIDs, slot)
	}
	out, errOut, code := w2.cli("create", "y", "--policy", w2.policy, "--", "/bin/sh", "-c", "exec sleep 1000")
	if code != contract.ExitUnreachable || !strings.Contains(errOut, "no free range") || !strings.Contains(errOut, idrange.DefaultClaimDir()) {
		t.Fatalf("y on the second gateway: exit %d %s%s; want 5 naming the full pool", code, out, errOut)
	}
	if out, _, _ := w2.cli("list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("the second gateway lists %s after the refused create", out)
	}
	if s, _ := w1.get("x"); s.Phase != "Ready" || s.WorkloadPid != x.WorkloadPid {
		t.Errorf("x after the refused create: %+v", s)
	}
	// The claim lost while x is stopped: y gets the range.
	if _, errOut, code := w1.cli("stop", "x"); code != 0 {
		t.Fatalf("stop x: %s", errOut)
	}
	claim := filepath.Join(idrange.DefaultClaimDir(), strconv.FormatUint(uint64(slot.Base), 10))
	if err := os.Remove(claim); err != nil {
		t.Fatal(err)
	}
	y := w2.create("y", "exec sleep 1000")
	if y.HostIDs != slot.String() {
		t.Fatalf("y: hostIds %q", y.HostIDs)
	}
	// x must not run with y's ids: its start fails, naming y.
	out, errOut, _ = w1.cli("start", "x")
	s := w1.waitPhase("x", "Error", 60*time.Second, nil)
	if s.Reason != "StartFailed" || !strings.Contains(s.Message, "in use by sandbox y of state dir "+w2.state) || !strings.Contains(s.Message, "never share host ids") {
		t.Errorf("x started beside y: %+v (start said %s%s)", s, out, errOut)
	}
	if s, _ := w2.get("y"); s.Phase != "Ready" || s.WorkloadPid != y.WorkloadPid {
		t.Errorf("y after x's attempt: %+v", s)
	}
	// y stopped but existing: still refused.
	if _, errOut, code := w2.cli("stop", "y"); code != 0 {
		t.Fatalf("stop y: %s", errOut)
	}
	w1.cli("start", "x")
	w1.waitPhase("x", "Error", 60*time.Second, func(s status) bool {
		return strings.Contains(s.Message, "sandbox y of state dir "+w2.state+", which still exists")
	})
	// y deleted: its claim is stale, and x starts.
	if _, errOut, code := w2.cli("delete", "y"); code != 0 {
		t.Fatalf("delete y: %s", errOut)
	}
	w1.cli("start", "x")
	if s := w1.waitPhase("x", "Ready", 60*time.Second, nil); s.HostIDs != slot.String() {
		t.Errorf("x after y's delete: %+v", s)
	}
}

// TestHostIDsEarlierRecord: a record of an earlier version (no range, its
// workspace's files owned by 100000 + the id inside) gets a range at its
// next start, and its files are moved into it: the workload reads and
// writes them and sees the same owners inside; a link pointing out of
// the workspace is not followed.
func TestHostIDsEarlierRecord(t *testing.T) {
	w := newWorld(t, 0)
	script := `while [ ! -f /sandbox/go ]; do sleep 0.1; done
{ stat -c '%u:%g %n' /sandbox/mine /sandbox/d/theirs; cat /sandbox/mine /sandbox/d/theirs; } > /sandbox/seen.tmp 2>&1
echo more >> /sandbox/mine && echo more >> /sandbox/d/theirs && echo wrote >> /sandbox/seen.tmp
mv /sandbox/seen.tmp /sandbox/seen
exec sleep 1000`
	s := w.create("old", script)
	if _, errOut, code := w.cli("stop", "old"); code != 0 {
		t.Fatalf("stop: %s", errOut)
	}
	w.shutdown()
	// Make it an earlier version's: no range in the record, and the files
	// as an earlier supervisor left them (100000 + the id inside).
	st, err := store.Open(contract.StateDir(w.state).Store())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Get(context.Background(), "old")
	if err != nil || rec.HostIDs == nil {
		t.Fatalf("record: %+v %v", rec, err)
	}
	rec.HostIDs, rec.ShiftIDs = nil, nil
	if _, err := st.Put(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	st.Close()
	ws := s.Workspace
	outside := filepath.Join(t.TempDir(), "outside")
	write(t, outside, "host file\n")
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws, "mine"), "root's\n")
	write(t, filepath.Join(ws, "d", "theirs"), "uid 1000's\n")
	if err := os.Symlink(outside, filepath.Join(ws, "d", "link")); err != nil {
		t.Fatal(err)
	}
	for p, id := range map[string]int{ws: 100000, "mine": 100000, "d": 101000, "d/theirs": 101000, "d/link": 101000, outside: 100007} {
		if !filepath.IsAbs(p) {
			p = filepath.Join(ws, p)
		}
		if err := os.Lchown(p, id, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(ws, "d", "theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.startGateway()
	if _, errOut, code := w.cli("start", "old"); code != 0 {
		t.Fatalf("start: %s", errOut)
	}
	s = w.waitPhase("old", "Ready", 60*time.Second, nil)
	r := hostRange(t, s)
	write(t, filepath.Join(ws, "go"), "")
	seen := w.file(s, "seen")
	if want := "0:0 /sandbox/mine\n1000:1000 /sandbox/d/theirs\nroot's\nuid 1000's\nwrote\n"; seen != want {
		t.Errorf("inside after the shift:\n%s\nwant:\n%s", seen, want)
	}
	for p, id := range map[string]uint32{"mine": r.Base, "d": r.Base + 1000, "d/theirs": r.Base + 1000, "d/link": r.Base + 1000} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, p), &st); err != nil || st.Uid != id || st.Gid != id {
			t.Errorf("%s on the host: %d:%d %v, want %d", p, st.Uid, st.Gid, err, id)
		}
	}
	var ost unix.Stat_t
	if err := unix.Lstat(outside, &ost); err != nil || ost.Uid != 100007 {
		t.Errorf("the link's target outside the workspace was changed: uid %d %v", ost.Uid, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "d", "theirs")); string(b) != "uid 1000's\nmore\n" {
		t.Errorf("d/theirs: %q", b)
	}
	// The shift is done: the record no longer lists a range to move from.
	w.shutdown()
	st, err = store.Open(contract.StateDir(w.state).Store())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if rec, err := st.Get(context.Background(), "old"); err != nil || rec.HostIDs == nil || *rec.HostIDs != r || rec.ShiftIDs != nil {
		t.Errorf("record after the start: hostIds %v shiftIds %v %v", rec.HostIDs, rec.ShiftIDs, err)
	}
}

// TestUIDPoolFlag: a pool not on 65,536 boundaries is a usage error
// (exit 2) naming the rule; a pool overlapping the host's subordinate ids
// is refused with the file and line (actors/gateway's TestIDPoolRefused).
func TestUIDPoolFlag(t *testing.T) {
	testenv.NeedRoot(t)
	cmd := exec.Command(bin, "gateway", "run", "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--uid-pool", "100000-165535")
	out, errOut, code := runCmd(t, cmd)
	if code != 2 || !strings.Contains(errOut, "65536 boundaries") {
		t.Errorf("--uid-pool 100000-165535: exit %d %s%s", code, out, errOut)
	}
}
