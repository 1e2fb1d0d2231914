package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestStopAllKillsGroup: a server's background child, which ignores
// SIGTERM, is gone after stopAll.
func TestStopAllKillsGroup(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	dir := t.TempDir()
	s := &servers{dir: dir, log: zerolog.Nop()}
	pidFile := filepath.Join(dir, "child.pid")
	srv, err := s.start("group", sh, "-c", `trap "" TERM; sleep 60 & echo $! > `+pidFile+`; wait`)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	err = srv.waitFor(context.Background(), 5*time.Second, func() error {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !alive(child) {
		t.Fatalf("child %d not running", child)
	}
	s.stopAll()
	if !srv.exited() {
		t.Fatal("server not reaped after stopAll")
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the stopped server still alive", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServerFailure: a server that exits at once is reported with its
// exit status and log tail instead of waiting out the timeout.
func TestServerFailure(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	s := &servers{dir: t.TempDir(), log: zerolog.Nop()}
	defer s.stopAll()
	srv, err := s.start("broken", sh, "-c", "echo no such flag >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = srv.waitFor(context.Background(), 10*time.Second, dialCheck("127.0.0.1:1"))
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "no such flag") {
		t.Fatalf("want exit status and log tail, got %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("waitFor took %s for an exited server", time.Since(start))
	}
}

// TestDNSPeer runs dnsmasq as the harness does and dnsperf for 1 s: the
// split is exact, nothing is lost and dnsmasq's CPU time is measured.
func TestDNSPeer(t *testing.T) {
	dnsmasq, dnsperf := testenv.NeedTool(t, "dnsmasq", "dnsmasq-base"), testenv.NeedTool(t, "dnsperf", "dnsperf")
	testenv.NeedRoot(t) // dnsmasq drops privileges only when started as root
	// Not t.TempDir: its parent is 0700 and dnsmasq reads the hosts file
	// as nobody.
	dir, err := os.MkdirTemp("", "bench-dns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	f, err := writeFiles(fileParams{dir: dir, names: 10, echoPort: 1, sinkPort: 2, binary: "/**", tinyproxyPort: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := &servers{dir: dir, log: zerolog.Nop()}
	defer s.stopAll()
	h := &harness{cfg: Config{Duration: time.Second, DNSClients: 2, DNSThreads: 1, DNSOutstanding: 20},
		tools: Tools{Path: map[string]string{"dnsperf": dnsperf}}, dir: dir, files: f}
	dm := &system{name: "dnsmasq", dns: fmt.Sprintf("127.0.0.1:%d", port)}
	srv, err := s.start("dnsmasq", dnsmasq, dnsmasqArgs(port, f.hosts)...)
	if err != nil {
		t.Fatal(err)
	}
	dm.srv, dm.pid = srv, srv.pid()
	if err := srv.waitFor(context.Background(), 10*time.Second, func() error { return h.checkDNS(dm.dns) }); err != nil {
		t.Fatal(err)
	}
	cpu0 := dm.cpu()
	res, err := h.runDNSPerf(context.Background(), dm)
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed == 0 || !res.splitExact() {
		t.Fatalf("want an exact split, got %+v", res)
	}
	if dm.cpu().total() <= cpu0.total() {
		t.Fatalf("dnsmasq CPU time did not grow over %d queries", res.Completed)
	}
}

// TestOwnSessions: a server and a short command each run in a session of
// their own (each its own scheduling group under the kernel's autogroup,
// as a gateway's supervisor is), not in the harness's.
func TestOwnSessions(t *testing.T) {
	sh := testenv.NeedTool(t, "sh", "dash")
	mine, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	s := &servers{dir: t.TempDir(), log: zerolog.Nop()}
	defer s.stopAll()
	srv, err := s.start("session", sh, "-c", "sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if sid, err := unix.Getsid(srv.pid()); err != nil || sid != srv.pid() || sid == mine {
		t.Fatalf("server %d: session %d (%v), the harness's %d; want a session of its own", srv.pid(), sid, err, mine)
	}
	// A command's session: the fourth field after the ")" that ends the
	// command's name in its own /proc/PID/stat (the name may hold spaces).
	out, err := runCmd(context.Background(), t.TempDir(), sh, "-c", `echo $$; cat /proc/$$/stat`)
	if err != nil {
		t.Fatal(err)
	}
	first, stat, _ := strings.Cut(string(out), "\n")
	i := strings.LastIndexByte(stat, ')')
	fields := strings.Fields(stat[i+1:])
	if i < 0 || len(fields) < 4 {
		t.Fatalf("unreadable stat %q", stat)
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(first))
	sid, err2 := strconv.Atoi(fields[3])
	if err1 != nil || err2 != nil {
		t.Fatalf("%q: %v %v", out, err1, err2)
	}
	if sid != pid || sid == mine {
		t.Fatalf("command %d: session %d, the harness's %d; want a session of its own", pid, sid, mine)
	}
}

// TestAutogroup: the header's word on autogroup follows the kernel's
// switch and where the harness's cpu cgroup is (autogroup applies only in
// the root one), and the rendered header carries it.
func TestAutogroup(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on, off := file("on", "1\n"), file("off", "0\n")
	v1root := file("v1root", "4:memory:/x/y\n2:cpu,cpuacct:/\n0::/z\n")
	v1sub := file("v1sub", "0::/\n1:cpu:/stockade-a\n")
	v2root := file("v2root", "0::/\n")
	v2sub := file("v2sub", "0::/system.slice/ci.service\n")
	for _, c := range []struct{ enabled, cgroups, want string }{
		{on, v1root, "on"},
		{on, v2root, "on"},
		{on, v1sub, "on, but the harness is in cpu cgroup /stockade-a, where it does not apply"},
		{on, v2sub, "on, but the harness is in cpu cgroup /system.slice/ci.service, where it does not apply"},
		{off, v1sub, "off"},
		{filepath.Join(dir, "absent"), v1root, "not in this kernel"},
	} {
		if got := autogroup(c.enabled, c.cgroups); got != c.want {
			t.Errorf("autogroup(%s, %s) = %q, want %q", filepath.Base(c.enabled), filepath.Base(c.cgroups), got, c.want)
		}
	}
	if got := autogroup(on, filepath.Join(dir, "absent")); !strings.HasPrefix(got, "on; the harness's cpu cgroup unknown: ") {
		t.Errorf("no cgroup file: %q", got)
	}
	if got := autogroup(dir, v1root); !strings.HasPrefix(got, "unknown: ") { // a directory: unreadable, not absent
		t.Errorf("unreadable switch: %q", got)
	}
	if line := fakeHarness("").header()[1]; !strings.Contains(line, "each process in a session of its own (autogroup ") {
		t.Errorf("header line %q does not say how processes are scheduled", line)
	}
}
