package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/actors/boundary"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/internal/testworld"
)

// binPath is the stockade binary built once for the end-to-end tests.
var binPath string

func TestMain(m *testing.M) { os.Exit(testenv.MainWithStockade(m, ".", &binPath)) }

// served is a running `stockade boundary serve` process.
type served struct {
	p     *testworld.Process
	cmd   *exec.Cmd // p.Cmd
	proxy string
	dns   string
}

// logHas reports whether the boundary's log (JSON lines) contains sub.
func (s *served) logHas(sub string) bool { return strings.Contains(s.p.Log.String(), sub) }

// serve starts `boundary serve` on free ports and waits for its ready
// file; at cleanup it must stop cleanly on SIGTERM and remove that file.
func serve(t *testing.T, args ...string) *served {
	t.Helper()
	return serveEnv(t, nil, args...)
}

// serveEnv is serve with env added to the process's environment.
func serveEnv(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	p := testworld.Start(t, testworld.Spec{Bin: binPath, Name: "boundary", Timeout: 20 * time.Second, Env: env,
		Args: append([]string{"boundary", "serve", "--log-format", "json", "--proxy", "127.0.0.1:0", "--dns", "127.0.0.1:0"}, args...)})
	t.Cleanup(func() {
		if err := p.Stop(15 * time.Second); err != nil {
			t.Errorf("boundary did not stop cleanly on SIGTERM: %v", err)
		}
		if _, err := os.Stat(p.ReadyFile); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the boundary left its ready file after a clean exit (stat: %v)", err)
		}
	})
	return &served{p: p, cmd: p.Cmd, proxy: p.Addrs.Proxy, dns: p.Addrs.DNS}
}

type fixture struct {
	dir, policy, hosts, audit string
	webPort                   int
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream says hi to %s", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	f := &fixture{dir: t.TempDir(), webPort: ln.Addr().(*net.TCPAddr).Port}
	f.policy = filepath.Join(f.dir, "policy.yaml")
	f.hosts = filepath.Join(f.dir, "hosts")
	f.audit = filepath.Join(f.dir, "audit.jsonl")
	f.writePolicy(t, "api.test")
	if err := os.WriteFile(f.hosts, []byte("127.0.0.1 api.test other.test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) writePolicy(t *testing.T, host string) {
	t.Helper()
	pol := fmt.Sprintf(`version: 1
network_policies:
  api:
    name: api
    endpoints: [{ host: %s, port: %d }]
    binaries: [{ path: /usr/bin/curl }]
`, host, f.webPort)
	if err := os.WriteFile(f.policy, []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
}

func curlVia(t *testing.T, proxy, url string) (code string, body string) {
	t.Helper()
	curl := testenv.NeedTool(t, "curl", "curl")
	out, err := exec.Command(curl, "-sS", "--max-time", "10", "-x", "http://"+proxy, "-w", "\n%{http_code}", url).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s: %v\n%s", url, err, out)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	return s[i+1:], s[:i+1]
}

func digAt(t *testing.T, server string, args ...string) string {
	t.Helper()
	dig := testenv.NeedTool(t, "dig", "dnsutils")
	host, port, _ := net.SplitHostPort(server)
	out, err := exec.Command(dig, append([]string{"@" + host, "-p", port, "+time=5", "+tries=1"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestServeAllowDenyRefuseAndReload runs the real binary: an allowed request,
// a denied one, a REFUSED name, all audited; SIGHUP with a valid policy
// makes version 2; SIGHUP with a broken one is refused and version 2 stays.
func TestServeAllowDenyRefuseAndReload(t *testing.T) {
	f := newFixture(t)
	s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--audit", f.audit, "--allow-loopback-upstream")
	url := func(h string) string { return fmt.Sprintf("http://%s:%d/", h, f.webPort) }

	if code, body := curlVia(t, s.proxy, url("api.test")); code != "200" || !strings.Contains(body, "upstream says hi") {
		t.Fatalf("allowed: %s %q", code, body)
	}
	if code, body := curlVia(t, s.proxy, url("other.test")); code != "403" || !strings.Contains(body, `"reason":"endpoint_not_allowed"`) {
		t.Fatalf("denied: %s %q", code, body)
	}
	if out := digAt(t, s.dns, "unlisted.example.org"); !strings.Contains(out, "status: REFUSED") {
		t.Fatalf("unlisted name:\n%s", out)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		b, _ := os.ReadFile(f.audit)
		a := string(b)
		return strings.Contains(a, `"status_detail":"endpoint_not_allowed"`) &&
			strings.Contains(a, `"status_detail":"policy_dns_ineligible"`) &&
			strings.Contains(a, `"path":"/usr/bin/curl"`)
	}, "audit file has the allowed, denied and refused decisions")
	if !s.logHas("NET:OPEN [MED] DENIED /usr/bin/curl(") || !s.logHas("[reason:endpoint_not_allowed]") {
		t.Fatalf("log lacks the one-line audit form of the denial")
	}

	// Reload: other.test becomes the allowed host (version 2).
	f.writePolicy(t, "other.test")
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, func() bool { return s.logHas(`"policy_version":2`) }, "policy version 2 loaded")
	if code, _ := curlVia(t, s.proxy, url("other.test")); code != "200" {
		t.Fatalf("after reload other.test: %s", code)
	}
	// A broken file is refused with line:col; version 2 stays.
	if err := os.WriteFile(f.policy, []byte("version: 1\nnetwork_policies:\n  x:\n    name: x\n    endpoints: [{ host: a.test, port: 70000 }]\n    binaries: [{ path: /usr/bin/curl }]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	testenv.Eventually(t, 10*time.Second, func() bool { return s.logHas("policy reload refused") }, "bad policy refused")
	if !s.logHas("policy.yaml:5:") {
		t.Fatalf("refusal does not name file:line:col")
	}
	if code, _ := curlVia(t, s.proxy, url("other.test")); code != "200" {
		t.Fatalf("after a refused reload other.test: %s (version 2 should stay)", code)
	}
}

// TestServeConnectRecords: as root, boundary serve records connects in the
// kernel by default and says so; curl's connection is then identified from
// its record (the audit names /usr/bin/curl, and the policy allows only
// curl; the metrics count it under source="record"). With
// --connect-records off it is identified by sock_diag and /proc alone, with
// the same decision.
func TestServeConnectRecords(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a BPF program needs root")
	}
	f := newFixture(t)
	url := fmt.Sprintf("http://api.test:%d/", f.webPort)
	for _, tc := range []struct {
		flag, want, not, source, other string
	}{
		{"auto", "connects recorded in the kernel", "connects are not recorded", "record", "sock_diag"},
		{"off", "", "connects recorded in the kernel", "sock_diag", "record"},
	} {
		s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream", "--connect-records", tc.flag, "--log-level", "debug",
			"--metrics", "127.0.0.1:0")
		if code, body := curlVia(t, s.proxy, url); code != "200" || !strings.Contains(body, "upstream says hi") {
			t.Fatalf("--connect-records %s: allowed curl got %s %q", tc.flag, code, body)
		}
		testenv.Eventually(t, 5*time.Second, func() bool { return s.logHas("NET:OPEN [INFO] ALLOWED /usr/bin/curl(") }, "the allowed decision names curl")
		if (tc.want != "" && !s.logHas(tc.want)) || s.logHas(tc.not) {
			t.Fatalf("--connect-records %s: log wants %q and not %q:\n%s", tc.flag, tc.want, tc.not, s.p.Log.String())
		}
		// The one connection was identified the way the flag says, not by
		// a silent fall back.
		m := s.metrics(t)
		for _, line := range []string{fmt.Sprintf("stockade_identity_connections_total{source=%q} 1\n", tc.source),
			fmt.Sprintf("stockade_identity_connections_total{source=%q} 0\n", tc.other)} {
			if !strings.Contains(m, line) {
				t.Fatalf("--connect-records %s: metrics lack %q (curl's one connection identified by %s):\n%s", tc.flag, line, tc.source, m)
			}
		}
	}
}

// TestServeSecondSignalStillCleans: a second SIGTERM while the boundary
// is stopping (a service manager's repeat, a second ^C) does not end it
// before its closes have run. A connection held in a 2 s delay fault keeps
// the stop going that long; the second signal comes once the stop is
// logged. The boundary must exit 0 with its ready file removed (serve's
// cleanup checks both) and its audit file holding the denial made before.
func TestServeSecondSignalStillCleans(t *testing.T) {
	f := newFixture(t)
	s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--audit", f.audit, "--allow-loopback-upstream",
		"--fault", "proxy.accept=delay/2s:1@1", "--metrics", "127.0.0.1:0")
	if code, _ := curlVia(t, s.proxy, fmt.Sprintf("http://other.test:%d/", f.webPort)); code != "403" {
		t.Fatalf("denied: %s", code)
	}
	held, err := net.Dial("tcp", s.proxy) // the second connection: delayed 2 s in its actor
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// Counted as the proxy actor spawns its conn actor, which then waits
	// out the delay whatever the stop does meanwhile.
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(s.metrics(t), `stockade_boundary_events_total{event="conn"} 2`)
	}, "the held connection accepted")
	begun := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	testenv.Eventually(t, 10*time.Second, func() bool { return s.logHas("boundary stopping") }, "the boundary logs its stop")
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.p.Stop(15 * time.Second); err != nil {
		t.Fatalf("a second SIGTERM during the stop: %v (want a clean exit)\n%s", err, s.p.Log.String())
	}
	if took := time.Since(begun); took < time.Second {
		t.Fatalf("the stop took %s: the delayed connection did not hold it, so the second signal proved nothing", took)
	}
	if b, _ := os.ReadFile(f.audit); !strings.Contains(string(b), `"status_detail":"endpoint_not_allowed"`) {
		t.Fatalf("the audit file lacks the denial after the stop:\n%s", b)
	}
}

// TestServeIdentityPanicDeniesCleanly: with the identity lookup panicking,
// curl gets 403 identity_unavailable, the process keeps serving DNS.
func TestServeIdentityPanicDeniesCleanly(t *testing.T) {
	f := newFixture(t)
	s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--allow-loopback-upstream", "--fault", "identity.lookup=panic:3",
		"--metrics", "127.0.0.1:0")
	for i := 0; i < 3; i++ {
		code, body := curlVia(t, s.proxy, fmt.Sprintf("http://api.test:%d/", f.webPort))
		if code != "403" || !strings.Contains(body, `"reason":"identity_unavailable"`) {
			t.Fatalf("request %d under identity panic: %s %q", i, code, body)
		}
	}
	if code, _ := curlVia(t, s.proxy, fmt.Sprintf("http://api.test:%d/", f.webPort)); code != "200" {
		t.Fatalf("request after the faults: %s", code)
	}
	if out := digAt(t, s.dns, "api.test"); !strings.Contains(out, "status: NOERROR") {
		t.Fatalf("dns after the faults:\n%s", out)
	}
	// The three failed conn actors were stopped by their supervisor, counted
	// in the metrics; no listener was restarted.
	metrics := s.metrics(t)
	if !strings.Contains(metrics, `stockade_supervisor_directives_total{directive="stop",kind="conn"} 3`) {
		t.Fatalf("metrics lack 3 conn stops:\n%s", metrics)
	}
	if strings.Contains(metrics, `directive="restart"`) {
		t.Fatalf("a restart was counted:\n%s", metrics)
	}
}

func (s *served) metrics(t *testing.T) string {
	t.Helper()
	addr := s.p.Addrs.Metrics
	if addr == "" {
		t.Fatal("the ready file has no metrics address (serve with --metrics)")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestServeRefusesInvalidPolicyAtStart(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("version: 2\nnetwork_policies:\n  a:\n    hots: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "boundary", "serve", "--policy", p, "--proxy", "127.0.0.1:0", "--dns", "")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitUsage {
		t.Fatalf("want exit %d, got %v\n%s", exitUsage, err, out)
	}
	if !strings.Contains(string(out), "bad.yaml:1:") || !strings.Contains(string(out), "bad.yaml:4:") {
		t.Fatalf("errors lack file:line:col for both problems:\n%s", out)
	}
}

// TestServeDenialFloodKeepsTheLogBounded plays a workload that floods the
// boundary with DNS queries for names it may not resolve (each a denial,
// REFUSED): with an audit file the log keeps at most
// LogDenialsPerMinute denial lines a minute and says how many it left out,
// while the audit file, which rotates, records every one. Before the limit
// each denial was a log line (73 MB in 6 s of dnsperf), in a supervisor's
// log that nothing rotates.
func TestServeDenialFloodKeepsTheLogBounded(t *testing.T) {
	const flood = 3000
	f := newFixture(t)
	s := serve(t, "--policy", f.policy, "--hosts", f.hosts, "--audit", f.audit, "--allow-loopback-upstream")
	c, err := dns.Dial("udp", s.dns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range flood {
		q := new(dns.Msg).SetQuestion(fmt.Sprintf("flood-%d.test.", i), dns.TypeA)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
		r, err := c.ReadMsg()
		if err != nil || r.Id != q.Id || r.Rcode != dns.RcodeRefused {
			t.Fatalf("query %d: %v, err %v; want REFUSED", i, r, err)
		}
	}
	if err := s.p.Stop(15 * time.Second); err != nil {
		t.Fatalf("boundary did not stop cleanly: %v", err)
	}

	logText := s.p.Log.String()
	lines, notLogged := 0, 0
	for _, l := range strings.Split(logText, "\n") {
		switch {
		case strings.Contains(l, `"denialsNotLogged"`):
			var n int
			if _, err := fmt.Sscanf(l[strings.Index(l, `"denialsNotLogged":`):], `"denialsNotLogged":%d`, &n); err != nil {
				t.Fatalf("report line %q: %v", l, err)
			}
			notLogged += n
		case strings.Contains(l, "DNS:QUERY") && strings.Contains(l, "DENIED"):
			lines++
		}
	}
	// One minute's lines, two if the test ran across a window's end.
	if lines < 1 || lines > 2*boundary.LogDenialsPerMinute || lines+notLogged != flood {
		t.Fatalf("log: %d denial lines + %d reported as left out, want at most %d lines and %d in all",
			lines, notLogged, 2*boundary.LogDenialsPerMinute, flood)
	}
	if len(logText) > 256<<10 {
		t.Fatalf("the log grew by %d bytes under %d denials", len(logText), flood)
	}
	b, err := os.ReadFile(f.audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"status_detail":"policy_dns_ineligible"`); n != flood {
		t.Fatalf("audit file has %d DNS denials, want every one of the %d", n, flood)
	}
	t.Logf("%d denials: %d log lines, %d reported as left out, log %d bytes, audit file %d bytes", flood, lines, notLogged, len(logText), len(b))
}
