package policy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/policy/reason"
)

const semanticsPolicy = `version: 1
network_policies:
  wild:
    name: Wild Card
    endpoints:
      - { host: "*.example.com", port: 443 }
      - { host: "*.internal.corp", port: 5432, allowed_ips: [10.0.0.0/8] }
      - { host: db.internal.corp, port: 5433 }
      - { host: multi.example.org, ports: [80, 8080] }
      - { host: Upper.Example.NET., port: 443 }
    binaries:
      - { path: /usr/bin/curl }
      - { path: "/opt/*/bin/tool" }
      - { path: "/nix/store/**/bin/agent" }
  other:
    endpoints:
      - { host: "*.internal.corp", port: 5432, allowed_ips: [10.0.0.0/8] }
    binaries: [{ path: /usr/bin/psql }]
  nobin:
    endpoints: [{ host: nobody.example.net, port: 443 }]
`

func mustEngine(t testing.TB, src string, opts ...Option) *Engine {
	t.Helper()
	e := NewEngine(opts...)
	if _, err := e.Load("test.yaml", []byte(src)); err != nil {
		t.Fatalf("load: %v", err)
	}
	return e
}

func compatFile(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/compat/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type netCase struct {
	name   string
	in     NetworkInput
	allow  bool
	reason reason.Code
	policy string
}

func runNetCases(t *testing.T, e *Engine, cases []netCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := e.DecideNetwork(context.Background(), tc.in)
			if d.Allow != tc.allow || d.Reason != tc.reason || d.Policy != tc.policy {
				t.Errorf("%+v\n got allow=%v reason=%q policy=%q (%s)\nwant allow=%v reason=%q policy=%q",
					tc.in, d.Allow, d.Reason, d.Policy, d.Message, tc.allow, tc.reason, tc.policy)
			}
			if d.Version != e.Version() || d.Message == "" {
				t.Errorf("version %d (engine %d), message %q", d.Version, e.Version(), d.Message)
			}
		})
	}
}

func TestDecideSemantics(t *testing.T) {
	e := mustEngine(t, semanticsPolicy)
	curl := "/usr/bin/curl"
	const (
		ok   = reason.None
		noEP = reason.EndpointNotAllowed
		noBi = reason.BinaryNotAllowed
	)
	runNetCases(t, e, []netCase{
		{"wildcard one label", NetworkInput{Host: "a.example.com", Port: 443, Exe: curl}, true, ok, "wild"},
		{"wildcard case and trailing dot", NetworkInput{Host: "A.Example.COM.", Port: 443, Exe: curl}, true, ok, "wild"},
		{"wildcard not the apex", NetworkInput{Host: "example.com", Port: 443, Exe: curl}, false, noEP, "-"},
		{"wildcard not two labels", NetworkInput{Host: "a.b.example.com", Port: 443, Exe: curl}, false, noEP, "-"},
		{"wildcard empty first label", NetworkInput{Host: ".example.com", Port: 443, Exe: curl}, false, noEP, "-"},
		{"wildcard wrong port", NetworkInput{Host: "a.example.com", Port: 80, Exe: curl}, false, noEP, "-"},
		{"suffix lookalike", NetworkInput{Host: "a.notexample.com", Port: 443, Exe: curl}, false, noEP, "-"},
		{"ports first", NetworkInput{Host: "multi.example.org", Port: 80, Exe: curl}, true, ok, "wild"},
		{"ports second", NetworkInput{Host: "multi.example.org", Port: 8080, Exe: curl}, true, ok, "wild"},
		{"ports unlisted", NetworkInput{Host: "multi.example.org", Port: 443, Exe: curl}, false, noEP, "-"},
		{"policy host normalised", NetworkInput{Host: "upper.example.net", Port: 443, Exe: curl}, true, ok, "wild"},
		{"glob star in segment", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/opt/x/bin/tool"}, true, ok, "wild"},
		{"glob star not across slash", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/opt/x/y/bin/tool"}, false, noBi, "wild"},
		{"glob double star across", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/nix/store/abc/def/bin/agent"}, true, ok, "wild"},
		{"glob double star one", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/nix/store/abc/bin/agent"}, true, ok, "wild"},
		{"exact binary only exact", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl2"}, false, noBi, "wild"},
		{"ancestor exact", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/python3", Ancestors: []string{"/usr/bin/bash", curl}}, true, ok, "wild"},
		{"ancestor glob", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/python3", Ancestors: []string{"/opt/q/bin/tool"}}, true, ok, "wild"},
		{"no binary nor ancestor", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/wget", Ancestors: []string{"/usr/bin/bash"}}, false, noBi, "wild"},
		{"binary of another policy", NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/psql"}, false, noBi, "wild"},
		{"merged wildcard of another policy", NetworkInput{Host: "db.internal.corp", Port: 5432, Exe: "/usr/bin/psql"}, true, ok, "other"},
		{"unknown host", NetworkInput{Host: "example.org", Port: 443, Exe: curl}, false, noEP, "-"},
		{"policy without binaries", NetworkInput{Host: "nobody.example.net", Port: 443, Exe: curl}, false, noBi, "nobin"},
		{"identity none ignores binaries", NetworkInput{Host: "nobody.example.net", Port: 443, Exe: curl, IdentityNone: true}, true, ok, "nobin"},
		{"identity none no exe", NetworkInput{Host: "a.example.com", Port: 443, IdentityNone: true}, true, ok, "wild"},
		{"identity none still needs endpoint", NetworkInput{Host: "example.org", Port: 443, IdentityNone: true}, false, noEP, "-"},
	})
}

func TestDecideMessages(t *testing.T) {
	e := mustEngine(t, semanticsPolicy)
	ctx := context.Background()
	for _, tc := range []struct {
		in   NetworkInput
		want string
	}{
		{NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}, `allowed by policy "wild" for /usr/bin/curl`},
		{NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/wget", Ancestors: []string{"/bin/sh"}}, `policy "wild" lists a.example.com:443 but neither binary /usr/bin/wget nor its ancestors ["/bin/sh"]`},
		{NetworkInput{Host: "example.org", Port: 443, Exe: "/usr/bin/curl"}, "no policy lists example.org:443"},
		{NetworkInput{Host: "nobody.example.net", Port: 443, IdentityNone: true}, `allowed by policy "nobin" (identity mode none: binaries ignored, endpoint-only match)`},
		{NetworkInput{Host: "example.org", Port: 443, IdentityNone: true}, "no policy lists example.org:443 (identity mode none: binaries ignored, endpoint-only match)"},
	} {
		if d := e.DecideNetwork(ctx, tc.in); d.Message != tc.want {
			t.Errorf("%+v: message %q, want %q", tc.in, d.Message, tc.want)
		}
	}
}

func TestDecideDestinationInfo(t *testing.T) {
	e := mustEngine(t, semanticsPolicy)
	ctx := context.Background()
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		in    NetworkInput
		exact bool
		ips   []netip.Prefix
	}{
		// The exact endpoint (its own port: overlapping endpoints that
		// disagree on allowed_ips are refused at load, as OpenShell does).
		{NetworkInput{Host: "db.internal.corp", Port: 5433, Exe: "/usr/bin/curl"}, true, nil},
		// curl: the Wild Card wildcard allows, with its range.
		{NetworkInput{Host: "db.internal.corp", Port: 5432, Exe: "/usr/bin/curl"}, false, []netip.Prefix{p("10.0.0.0/8")}},
		// psql: only the other policy's wildcard allows (the same range: they must agree).
		{NetworkInput{Host: "db.internal.corp", Port: 5432, Exe: "/usr/bin/psql"}, false, []netip.Prefix{p("10.0.0.0/8")}},
		{NetworkInput{Host: "x.internal.corp", Port: 5432, Exe: "/usr/bin/curl"}, false, []netip.Prefix{p("10.0.0.0/8")}},
		// Identity none: every endpoint for host:port allows; their ranges, once.
		{NetworkInput{Host: "x.internal.corp", Port: 5432, IdentityNone: true}, false, []netip.Prefix{p("10.0.0.0/8")}},
		{NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}, false, nil},
		{NetworkInput{Host: "multi.example.org", Port: 80, Exe: "/usr/bin/curl"}, true, nil},
		{NetworkInput{Host: "example.org", Port: 80, Exe: "/usr/bin/curl"}, false, nil},
	} {
		d := e.DecideNetwork(ctx, tc.in)
		if d.ExactHost != tc.exact || !slices.Equal(d.AllowedIPs, tc.ips) {
			t.Errorf("%+v: exact=%v ips=%v, want exact=%v ips=%v (%s)", tc.in, d.ExactHost, d.AllowedIPs, tc.exact, tc.ips, d.Message)
		}
	}
}

func TestDecideDNS(t *testing.T) {
	e := mustEngine(t, semanticsPolicy)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		allow  bool
		policy string
	}{
		{"a.example.com", true, "wild"},
		{"A.EXAMPLE.com.", true, "wild"},
		{"example.com", false, "-"},
		{"a.b.example.com", false, "-"},
		{"db.internal.corp", true, "wild"},
		{"nobody.example.net", true, "nobin"}, // listed, even without binaries
		{"upper.example.net", true, "wild"},
		{"multi.example.org.", true, "wild"},
		{"example.org", false, "-"},
		{"", false, "-"},
		{"com", false, "-"},
	} {
		d := e.DecideDNS(ctx, DNSInput{Name: tc.name, QType: 1})
		wantReason := reason.None
		if !tc.allow {
			wantReason = reason.PolicyDNSIneligible
		}
		if d.Allow != tc.allow || d.Policy != tc.policy || d.Reason != wantReason || d.Version != 1 || d.Message == "" {
			t.Errorf("DNS %q: %+v, want allow=%v policy=%q", tc.name, d, tc.allow, tc.policy)
		}
	}
}

func TestCompatDecisions(t *testing.T) {
	e := NewEngine()
	if _, err := e.Load("sandbox-policy.yaml", compatFile(t, "crates_openshell-supervisor-network_testdata_sandbox-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	copilotNM := "/usr/lib/node_modules/@github/copilot/node_modules/@github/x/y/copilot"
	runNetCases(t, e, []netCase{
		{"claude via node", NetworkInput{Host: "api.anthropic.com", Port: 443, Exe: "/usr/bin/node"}, true, reason.None, "claude_code"},
		{"claude via ancestor", NetworkInput{Host: "statsig.anthropic.com", Port: 443, Exe: "/usr/bin/node", Ancestors: []string{"/usr/local/bin/claude"}}, true, reason.None, "claude_code"},
		{"anthropic by curl", NetworkInput{Host: "api.anthropic.com", Port: 443, Exe: "/usr/bin/curl"}, false, reason.BinaryNotAllowed, "claude_code"},
		{"github by git: first policy in file order", NetworkInput{Host: "github.com", Port: 443, Exe: "/usr/bin/git"}, true, reason.None, "github_ssh_over_https"}, // the key; its name is github-ssh-over-https
		{"github by node", NetworkInput{Host: "github.com", Port: 443, Exe: "/usr/bin/node"}, true, reason.None, "copilot"},
		{"github by home glob", NetworkInput{Host: "github.com", Port: 443, Exe: "/home/alice/.local/bin/copilot"}, true, reason.None, "copilot"},
		{"home glob one segment", NetworkInput{Host: "github.com", Port: 443, Exe: "/home/alice/x/.local/bin/copilot"}, false, reason.BinaryNotAllowed, "github_ssh_over_https"},
		{"node_modules double star", NetworkInput{Host: "api.githubcopilot.com", Port: 443, Exe: copilotNM}, true, reason.None, "copilot"},
		{"gitlab by glab", NetworkInput{Host: "gitlab.com", Port: 443, Exe: "/usr/bin/glab"}, true, reason.None, "gitlab"},
		{"gitlab wrong port", NetworkInput{Host: "gitlab.com", Port: 22, Exe: "/usr/bin/glab"}, false, reason.EndpointNotAllowed, "-"},
	})
	// The transparent-tcp example: "/**" allows any absolute binary path.
	redis := NewEngine()
	if _, err := redis.Load("redis.yaml", compatFile(t, "examples_transparent-tcp-redis_policy.yaml")); err != nil {
		t.Fatal(err)
	}
	d := redis.DecideNetwork(context.Background(), NetworkInput{Host: "redis.openshell.demo", Port: 6379, Exe: "/usr/local/bin/redis-cli"})
	if !d.Allow || !d.ExactHost || len(d.AllowedIPs) != 3 {
		t.Errorf("redis: %+v", d)
	}
}

func TestNoPolicyDeniesUnavailable(t *testing.T) {
	e := NewEngine()
	ctx := context.Background()
	if p, v := e.Current(); p != nil || v != 0 || e.Version() != 0 {
		t.Fatalf("Current = %v, %d", p, v)
	}
	for _, d := range []Decision{
		e.DecideNetwork(ctx, NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}),
		e.DecideDNS(ctx, DNSInput{Name: "a.example.com", QType: 1}),
	} {
		if d.Allow || d.Reason != reason.PolicyUnavailable || d.Policy != "-" || d.Version != 0 {
			t.Errorf("no policy: %+v", d)
		}
	}
	// An invalid first policy leaves the engine without one.
	if _, err := e.Load("bad.yaml", []byte("version: 2\n")); err == nil {
		t.Fatal("invalid policy loaded")
	}
	if d := e.DecideNetwork(ctx, NetworkInput{Host: "a.example.com", Port: 443}); d.Reason != reason.PolicyUnavailable {
		t.Errorf("after invalid load: %+v", d)
	}
}

func hostPolicy(host string) string {
	return fmt.Sprintf("version: 1\nnetwork_policies:\n  p:\n    name: %s\n    endpoints: [{host: %s, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n", host, host)
}

func TestVersionsAndReload(t *testing.T) {
	e := NewEngine()
	ctx := context.Background()
	in := func(h string) NetworkInput { return NetworkInput{Host: h, Port: 443, Exe: "/usr/bin/curl"} }
	v1, err := e.Load("a.yaml", []byte(hostPolicy("a.example.com")))
	if err != nil || v1 != 1 {
		t.Fatalf("first load: %d %v", v1, err)
	}
	if d := e.DecideNetwork(ctx, in("a.example.com")); !d.Allow || d.Version != 1 {
		t.Fatalf("v1 decision: %+v", d)
	}
	v2, err := e.Load("b.yaml", []byte(hostPolicy("b.example.com")))
	if err != nil || v2 != 2 || e.Version() != 2 {
		t.Fatalf("second load: %d %v", v2, err)
	}
	// The cache belongs to a version: the v1 answer is not reused.
	if d := e.DecideNetwork(ctx, in("a.example.com")); d.Allow || d.Version != 2 || d.Reason != reason.EndpointNotAllowed {
		t.Errorf("a after v2: %+v", d)
	}
	// An invalid reload reports every error and keeps version 2.
	v, err := e.Load("bad.yaml", []byte("version: 1\nnetwork_policies:\n  p:\n    endpoints: [{host: '*', port: 0}]\n"))
	var list ErrorList
	if v != 0 || !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("invalid reload: v=%d err=%v", v, err)
	}
	if p, cur := e.Current(); cur != 2 || p.File != "b.yaml" || e.Version() != 2 {
		t.Errorf("after invalid reload: %v %d", p.File, cur)
	}
	if d := e.DecideNetwork(ctx, in("b.example.com")); !d.Allow || d.Version != 2 {
		t.Errorf("b after invalid reload: %+v", d)
	}
	if v3, _ := e.Load("a.yaml", []byte(hostPolicy("a.example.com"))); v3 != 3 {
		t.Errorf("third valid load got version %d, want 3", v3)
	}
}

func TestFaultInjection(t *testing.T) {
	faults := fault.NewSet()
	e := mustEngine(t, semanticsPolicy, WithFaults(faults))
	ctx := context.Background()
	cached := NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}
	if d := e.DecideNetwork(ctx, cached); !d.Allow {
		t.Fatalf("warm-up: %+v", d)
	}
	faults.Arm(fault.PolicyDecide, fault.Rule{Kind: fault.KindError})
	// A cached decision does not reach the injection point.
	if d := e.DecideNetwork(ctx, cached); !d.Allow || faults.Fired(fault.PolicyDecide) != 0 {
		t.Errorf("cached decision under fault: %+v fired=%d", d, faults.Fired(fault.PolicyDecide))
	}
	fresh := NetworkInput{Host: "b.example.com", Port: 443, Exe: "/usr/bin/curl"}
	for _, d := range []Decision{e.DecideNetwork(ctx, fresh), e.DecideDNS(ctx, DNSInput{Name: "b.example.com"})} {
		if d.Allow || d.Reason != reason.BoundaryFault || d.Version != 1 || !strings.Contains(d.Message, "injected fault") {
			t.Errorf("injected error: %+v", d)
		}
	}
	faults.Disarm(fault.PolicyDecide)
	// The failed decision was not cached.
	if d := e.DecideNetwork(ctx, fresh); !d.Allow {
		t.Errorf("after disarm: %+v", d)
	}
	faults.Arm(fault.PolicyDecide, fault.Rule{Kind: fault.KindPanic, Count: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("injected panic did not propagate")
			}
		}()
		e.DecideNetwork(ctx, NetworkInput{Host: "c.example.com", Port: 443})
	}()
	if n := faults.Fired(fault.PolicyDecide); n != 3 {
		t.Errorf("fired %d faults, want 3", n)
	}
}

func TestCancelledContextDeniesBoundaryFault(t *testing.T) {
	e := mustEngine(t, semanticsPolicy)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}
	if d := e.DecideNetwork(ctx, in); d.Allow || d.Reason != reason.BoundaryFault || !strings.Contains(d.Message, "context canceled") {
		t.Errorf("cancelled: %+v", d)
	}
	if d := e.DecideNetwork(context.Background(), in); !d.Allow {
		t.Errorf("the evaluation error was cached: %+v", d)
	}
}

// TestReasonCodes: the engine produces exactly these reason codes.
func TestReasonCodes(t *testing.T) {
	faults := fault.NewSet()
	e := NewEngine(WithFaults(faults))
	ctx := context.Background()
	got := map[reason.Code]bool{}
	got[e.DecideNetwork(ctx, NetworkInput{Host: "a.example.com", Port: 443}).Reason] = true
	if _, err := e.Load("s.yaml", []byte(semanticsPolicy)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []Decision{
		e.DecideNetwork(ctx, NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/curl"}),
		e.DecideNetwork(ctx, NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/wget"}),
		e.DecideNetwork(ctx, NetworkInput{Host: "example.org", Port: 443, Exe: "/usr/bin/curl"}),
		e.DecideDNS(ctx, DNSInput{Name: "example.org"}),
	} {
		got[d.Reason] = true
	}
	faults.Arm(fault.PolicyDecide, fault.Rule{Kind: fault.KindError, Count: 1})
	got[e.DecideDNS(ctx, DNSInput{Name: "q.example.org"}).Reason] = true
	want := []reason.Code{reason.None, reason.PolicyUnavailable, reason.BinaryNotAllowed, reason.EndpointNotAllowed, reason.PolicyDNSIneligible, reason.BoundaryFault}
	for _, c := range want {
		if !got[c] {
			t.Errorf("reason %q not produced", c)
		}
	}
	if len(got) != len(want) {
		t.Errorf("produced %v, want exactly %v", got, want)
	}
}

func TestCacheBounded(t *testing.T) {
	e := mustEngine(t, semanticsPolicy, WithCacheSize(4))
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		e.DecideNetwork(ctx, NetworkInput{Host: fmt.Sprintf("h%d.example.com", i), Port: 443, Exe: "/usr/bin/curl"})
	}
	s := e.cur.Load()
	if n := s.cache.len(); n > 8 || n < 4 {
		t.Errorf("cache holds %d entries, want 4..8", n)
	}
	// The key is the full input: ancestors and identity mode count.
	in := NetworkInput{Host: "a.example.com", Port: 443, Exe: "/usr/bin/wget"}
	if d := e.DecideNetwork(ctx, in); d.Allow {
		t.Fatal(d)
	}
	in.Ancestors = []string{"/usr/bin/curl"}
	if d := e.DecideNetwork(ctx, in); !d.Allow {
		t.Errorf("ancestor ignored by cache: %+v", d)
	}
	in.Ancestors = []string{"/usr/bin", "curl"} // not the same as "/usr/bin/curl"
	if d := e.DecideNetwork(ctx, in); d.Allow {
		t.Errorf("ancestor list confused in cache key: %+v", d)
	}
	nobody := NetworkInput{Host: "nobody.example.net", Port: 443, Exe: "/usr/bin/curl"}
	if d := e.DecideNetwork(ctx, nobody); d.Allow {
		t.Fatal(d)
	}
	nobody.IdentityNone = true
	if d := e.DecideNetwork(ctx, nobody); !d.Allow {
		t.Errorf("identity mode ignored by cache: %+v", d)
	}
	off := mustEngine(t, semanticsPolicy, WithCacheSize(0))
	off.DecideNetwork(ctx, nobody)
	if n := off.cur.Load().cache.len(); n != 0 {
		t.Errorf("disabled cache holds %d entries", n)
	}
}

// TestDecisionsDuringReloads: decisions racing reloads always answer for
// the version they report. Odd versions allow only a.example.com, even
// versions only b.example.com. Run once with -race.
func TestDecisionsDuringReloads(t *testing.T) {
	e := mustEngine(t, hostPolicy("a.example.com"))
	ctx := context.Background()
	const reloads, workers = 40, 4
	var stop atomic.Bool
	var decided atomic.Int64
	var versionsSeen sync.Map
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				host := "a.example.com"
				if (i+w)%2 == 1 {
					host = "b.example.com"
				}
				var d Decision
				if i%3 == 0 {
					d = e.DecideDNS(ctx, DNSInput{Name: host})
				} else {
					d = e.DecideNetwork(ctx, NetworkInput{Host: host, Port: 443, Exe: "/usr/bin/curl", Ancestors: []string{fmt.Sprint(i % 7)}})
				}
				decided.Add(1)
				versionsSeen.Store(d.Version, true)
				wantAllow := (d.Version%2 == 1) == (host == "a.example.com")
				if d.Version == 0 || d.Allow != wantAllow {
					errs <- fmt.Sprintf("%s at version %d: %+v", host, d.Version, d)
					return
				}
			}
		}(w)
	}
	deadline := time.Now().Add(20 * time.Second)
	// Let decisions run between reloads, so they overlap on a loaded CI box.
	progress := func() {
		start := decided.Load()
		for decided.Load() < start+20 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	progress()
	for v := 2; v <= reloads && time.Now().Before(deadline); v++ {
		progress()
		host := "a.example.com"
		if v%2 == 0 {
			host = "b.example.com"
		}
		if got, err := e.Load("p.yaml", []byte(hostPolicy(host))); err != nil || got != uint64(v) {
			t.Fatalf("reload %d: %d %v", v, got, err)
		}
		if v%10 == 0 { // invalid reloads in between change nothing
			if _, err := e.Load("bad.yaml", []byte("version: 3\n")); err == nil {
				t.Fatal("invalid reload accepted")
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	if e.Version() != reloads {
		t.Errorf("version %d, want %d", e.Version(), reloads)
	}
	n := 0
	versionsSeen.Range(func(_, _ any) bool { n++; return true })
	if n < 2 || decided.Load() < reloads {
		t.Errorf("decisions saw %d versions in %d decisions: reloads did not overlap decisions", n, decided.Load())
	}
	t.Logf("%d decisions over %d versions", decided.Load(), n)
}

// TestLoadVersion: the gateway's version numbers are kept; an older or
// equal one is refused and the current stays.
func TestLoadVersion(t *testing.T) {
	e := NewEngine()
	if v, err := e.LoadVersion("p.yaml", []byte(semanticsPolicy), 7); err != nil || v != 7 || e.Version() != 7 {
		t.Fatalf("LoadVersion 7: %d %v (version %d)", v, err, e.Version())
	}
	for _, old := range []uint64{0, 3, 7} {
		if _, err := e.LoadVersion("p.yaml", []byte(semanticsPolicy), old); err == nil {
			t.Errorf("version %d accepted after 7", old)
		}
	}
	if v, err := e.Load("p.yaml", []byte(semanticsPolicy)); err != nil || v != 8 {
		t.Fatalf("Load after 7: %d %v", v, err)
	}
}
