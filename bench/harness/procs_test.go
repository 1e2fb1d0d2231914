package harness

import (
	"context"
	"fmt"
	"github.com/stockade-dev/stockade/internal/testenv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
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
	// A command's session: field 6 of its own /proc/PID/stat.
	out, err := runCmd(context.Background(), t.TempDir(), sh, "-c", `read a b c d e sid rest < /proc/$$/stat; echo "$$ $sid"`)
	if err != nil {
		t.Fatal(err)
	}
	var pid, sid int
	if _, err := fmt.Sscan(string(out), &pid, &sid); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if sid != pid || sid == mine {
		t.Fatalf("command %d: session %d, the harness's %d; want a session of its own", pid, sid, mine)
	}
}
