package boundary_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

func TestConnectCarriesBytesBothWaysWithHalfClose(t *testing.T) {
	e := startEnv(t, envOpts{})
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT up.test: got %d %s, want 200", code, body)
	}
	defer c.Close()
	payload := bytes.Repeat([]byte("stockade-"), 100_000) // 900 kB each way
	go func() {
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite() // half-close: the echo still answers
	}()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read echo: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo through tunnel: got %d bytes, want %d identical", len(got), len(payload))
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return e.audit.count(audit.ClassNetwork, reason.None) == 1 },
		"one allowed network audit event")
}

func TestDeniedConnectGets403WithReason(t *testing.T) {
	e := startEnv(t, envOpts{})
	cases := []struct {
		host string
		port int
		want reason.Code
	}{
		{"denied.test", e.echoPort, reason.EndpointNotAllowed},
		{"up.test", e.echoPort + 1, reason.EndpointNotAllowed},
		{"curlonly.test", e.webPort, reason.BinaryNotAllowed}, // this test binary is not curl
		{"metadata.test", e.webPort, reason.EndpointNotAllowed},
	}
	for _, tc := range cases {
		code, body, _ := e.connect(t, tc.host, tc.port)
		if code != 403 {
			t.Fatalf("CONNECT %s:%d: got %d, want 403", tc.host, tc.port, code)
		}
		var d struct {
			Error, Reason, Policy, Host string
			Port                        int
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatalf("403 body %q: %v", body, err)
		}
		if d.Error != "policy_denied" || d.Reason != string(tc.want) || d.Host != tc.host || d.Port != tc.port {
			t.Fatalf("CONNECT %s:%d: body %+v, want policy_denied/%s", tc.host, tc.port, d, tc.want)
		}
	}
	if n := e.audit.count(audit.ClassNetwork, reason.BinaryNotAllowed); n != 1 {
		t.Fatalf("binary_not_allowed events: %d, want 1", n)
	}
}

func TestInternalAddressBlocked(t *testing.T) {
	e := startEnv(t, envOpts{})
	// Allow the metadata name by policy reload; the address check still blocks it.
	_, _ = e.engine.Load("p2.yaml", []byte(fmt.Sprintf(`version: 1
network_policies:
  meta:
    name: meta
    endpoints: [{ host: metadata.test, port: %d }]
    binaries: [{ path: "/**" }]
`, e.webPort)))
	code, body, _ := e.connect(t, "metadata.test", e.webPort)
	if code != 403 || !strings.Contains(body, string(reason.InternalAddressBlocked)) {
		t.Fatalf("CONNECT metadata.test: %d %s, want 403 internal_address_blocked", code, body)
	}
}

func TestUpstreamUnreachableIs502(t *testing.T) {
	e := startEnv(t, envOpts{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close() // nothing listens there now
	_, err := e.engine.Load("p3.yaml", []byte(fmt.Sprintf(`version: 1
network_policies:
  gone:
    name: gone
    endpoints: [{ host: up.test, port: %d }]
    binaries: [{ path: "/**" }]
`, port)))
	if err != nil {
		t.Fatal(err)
	}
	code, body, _ := e.connect(t, "up.test", port)
	if code != 502 || !strings.Contains(body, "upstream_unreachable") {
		t.Fatalf("CONNECT to a closed port: %d %s, want 502 upstream_unreachable", code, body)
	}
}

func TestCurlThroughProxy(t *testing.T) {
	curl := testenv.NeedTool(t, "curl", "curl")
	if curl != "/usr/bin/curl" {
		if r, _ := filepath.EvalSymlinks(curl); r != "/usr/bin/curl" {
			testenv.Unavailable(t, "curl is %s; the test policy names /usr/bin/curl", curl)
		}
	}
	e := startEnv(t, envOpts{})
	run := func(args ...string) (string, string) {
		out, err := exec.Command(curl, append([]string{"-sS", "--max-time", "10", "-x", "http://" + e.proxy, "-w", "\n%{http_code}"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		s := strings.TrimSpace(string(out))
		i := strings.LastIndexByte(s, '\n')
		return s[:i+1], s[i+1:]
	}
	url := func(host string) string { return fmt.Sprintf("http://%s:%d/path", host, e.webPort) }

	if body, code := run(url("web.test")); code != "200" || !strings.Contains(body, "hello web.test") {
		t.Fatalf("forward web.test: %s %q", code, body)
	}
	if body, code := run("-p", url("web.test")); code != "200" || !strings.Contains(body, "hello web.test") {
		t.Fatalf("CONNECT (proxytunnel) web.test: %s %q", code, body)
	}
	if body, code := run(url("curlonly.test")); code != "200" {
		t.Fatalf("curl-only policy: %s %q", code, body)
	}
	if body, code := run(url("a.wild.test")); code != "200" {
		t.Fatalf("wildcard host: %s %q", code, body)
	}
	body, code := run(url("denied.test"))
	if code != "403" || !strings.Contains(body, `"reason":"endpoint_not_allowed"`) {
		t.Fatalf("denied.test: %s %q", code, body)
	}
	// Audit shows curl as the process behind the connection.
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for _, ev := range e.audit.events {
		if ev.Dst != nil && ev.Dst.Hostname == "curlonly.test" {
			if ev.Actor == nil || ev.Actor.Path != "/usr/bin/curl" || ev.Actor.Pid == 0 {
				t.Fatalf("audit of curl's request names %+v, want /usr/bin/curl with a pid", ev.Actor)
			}
			return
		}
	}
	t.Fatal("no audit event for curlonly.test")
}

func TestDigThroughDNS(t *testing.T) {
	dig := testenv.NeedTool(t, "dig", "dnsutils")
	af := filepath.Join(t.TempDir(), "audit.jsonl")
	e := startEnv(t, envOpts{auditFile: af})
	host, port, _ := net.SplitHostPort(e.dns)
	run := func(args ...string) string {
		out, err := exec.Command(dig, append([]string{"@" + host, "-p", port, "+time=5", "+tries=1"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("up.test"); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("dig up.test:\n%s", out)
	}
	if out := run("+tcp", "WEB.test."); !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "127.0.0.1") {
		t.Fatalf("dig +tcp WEB.test.:\n%s", out)
	}
	if out := run("x.a.wild.test"); !strings.Contains(out, "status: REFUSED") {
		t.Fatalf("dig x.a.wild.test (two labels under a first-label wildcard):\n%s", out)
	}
	if out := run("unlisted.example.org"); !strings.Contains(out, "status: REFUSED") {
		t.Fatalf("dig unlisted.example.org:\n%s", out)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		data, _ := os.ReadFile(af)
		return strings.Contains(string(data), `"status_detail":"policy_dns_ineligible"`) &&
			strings.Contains(string(data), `"hostname":"unlisted.example.org"`)
	}, "audit file has policy_dns_ineligible for unlisted.example.org")
	data, _ := os.ReadFile(af)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev["class_uid"] != float64(4003) {
			t.Fatalf("DNS audit event with class_uid %v", ev["class_uid"])
		}
	}
}

// TestIdentityFailureContainment is seed 000: the peer-identity lookup of
// 200 concurrent connections fails (as an error, then as a panic); each
// client gets a clean 403 identity_unavailable, each denial is audited, the
// listener is never restarted, the next allowed request succeeds, and no
// goroutine is left behind.
func TestIdentityFailureContainment(t *testing.T) {
	for _, kind := range []fault.Kind{fault.KindError, fault.KindPanic} {
		t.Run(kind.String(), func(t *testing.T) {
			e := startEnv(t, envOpts{})
			// Warm up, so the goroutine baseline includes every lazily started one.
			if code, body, c := e.connect(t, "up.test", e.echoPort); code != 200 {
				t.Fatalf("warm-up: %d %s", code, body)
			} else {
				_ = c.Close()
			}
			testenv.Eventually(t, 5*time.Second, func() bool { return e.audit.count(audit.ClassNetwork, reason.None) == 1 }, "warm-up audited")
			time.Sleep(50 * time.Millisecond)
			ignore := goleak.IgnoreCurrent()

			const n = 200
			e.faults.Arm(fault.IdentityLookup, fault.Rule{Kind: kind})
			var wg sync.WaitGroup
			errs := make(chan string, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code, body, c := e.connect(t, "up.test", e.echoPort)
					if c != nil {
						_ = c.Close()
					}
					if code != 403 || !strings.Contains(body, `"reason":"identity_unavailable"`) {
						errs <- fmt.Sprintf("%d %s", code, body)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for msg := range errs {
				t.Fatalf("a client under identity %s got %s, want 403 identity_unavailable", kind, msg)
			}
			e.faults.Disarm(fault.IdentityLookup)
			if got := e.faults.Fired(fault.IdentityLookup); got != n {
				t.Fatalf("identity fault fired %d times, want %d", got, n)
			}
			testenv.Eventually(t, 5*time.Second, func() bool {
				return e.audit.count(audit.ClassNetwork, reason.IdentityUnavailable) == n
			}, "%d identity_unavailable audit events (have %d)", n, e.audit.count(audit.ClassNetwork, reason.IdentityUnavailable))

			code, body, c := e.connect(t, "up.test", e.echoPort)
			if code != 200 {
				t.Fatalf("next allowed request after the faults: %d %s", code, body)
			}
			_ = c.Close()

			if r := restartsOf(e.b, "proxy"); r != 0 {
				t.Fatalf("proxy actor restarted %d times; a conn fault must stay in its conn actor", r)
			}
			wantStops := int64(0)
			if kind == fault.KindPanic {
				wantStops = n
			}
			if s := stopsOf(e.b, "conn"); s != wantStops {
				t.Fatalf("conn actors stopped by their supervisor: %d, want %d", s, wantStops)
			}
			// Warm dispatch workers are bounded (64) and retire when idle;
			// they are not per-connection goroutines.
			goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("github.com/stockade-dev/stockade/actors/dispatch.(*Pool).worker"))
		})
	}
}

// TestDNSQueryFaultContainment: a panicking query actor answers SERVFAIL,
// is audited as boundary_fault, and the next query is answered.
func TestDNSQueryFaultContainment(t *testing.T) {
	dig := testenv.NeedTool(t, "dig", "dnsutils")
	e := startEnv(t, envOpts{})
	host, port, _ := net.SplitHostPort(e.dns)
	run := func(name string) string {
		out, _ := exec.Command(dig, "@"+host, "-p", port, "+time=5", "+tries=1", name).CombinedOutput()
		return string(out)
	}
	for _, p := range []fault.Point{fault.DNSQuery, fault.DNSUpstream} {
		e.faults.Arm(p, fault.Rule{Kind: fault.KindPanic, Count: 1})
		if out := run("up.test"); !strings.Contains(out, "status: SERVFAIL") {
			t.Fatalf("panic at %s: want SERVFAIL, got\n%s", p, out)
		}
		if out := run("up.test"); !strings.Contains(out, "status: NOERROR") {
			t.Fatalf("query after a panic at %s: want NOERROR, got\n%s", p, out)
		}
	}
	if n := e.audit.count(audit.ClassDNS, reason.BoundaryFault); n != 2 {
		t.Fatalf("boundary_fault DNS events: %d, want 2", n)
	}
	if r := restartsOf(e.b, "dns"); r != 0 {
		t.Fatalf("dns actor restarted %d times", r)
	}
	if s := stopsOf(e.b, "query"); s != 2 {
		t.Fatalf("query actors stopped by supervisor: %d, want 2", s)
	}
}

// TestDenialNamesPolicyKey: a denial reports the network_policies key as
// `policy` (OpenShell's convention) and the policy's name beside it as
// `policyName`, in the 403 body and in the audit event.
func TestDenialNamesPolicyKey(t *testing.T) {
	e := startEnv(t, envOpts{})
	if _, err := e.engine.Load("p2.yaml", []byte(fmt.Sprintf(`version: 1
network_policies:
  meta-key:
    name: Metadata Service
    endpoints: [{ host: metadata.test, port: %d }]
    binaries: [{ path: "/**" }]
`, e.webPort))); err != nil {
		t.Fatal(err)
	}
	code, body, _ := e.connect(t, "metadata.test", e.webPort) // allowed by policy, blocked by address
	var d struct {
		Reason     string `json:"reason"`
		Policy     string `json:"policy"`
		PolicyName string `json:"policyName"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || code != 403 {
		t.Fatalf("CONNECT metadata.test: %d %q (%v)", code, body, err)
	}
	if d.Policy != "meta-key" || d.PolicyName != "Metadata Service" || d.Reason != string(reason.InternalAddressBlocked) {
		t.Fatalf("403 body %+v, want policy meta-key, policyName Metadata Service", d)
	}
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for _, ev := range e.audit.events {
		if ev.Reason == reason.InternalAddressBlocked {
			if ev.Policy.Name != "meta-key" || ev.Policy.PolicyName != "Metadata Service" {
				t.Fatalf("audit policy %+v, want name meta-key, policyName Metadata Service", ev.Policy)
			}
			return
		}
	}
	t.Fatal("no audit event for the denial")
}
