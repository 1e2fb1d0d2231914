package policy

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/policy/reason"
)

// TestHostPatternMatch: rows derived from OpenShell's tests (snapshot
// 2f7fb65), each naming its source test.
func TestHostPatternMatch(t *testing.T) {
	const hp = "host_pattern.rs "
	const opa = "opa.rs "
	rows := []struct {
		pattern, host string
		match         bool
		src           string
	}{
		{"*.example.com", "api.example.com", true, hp + "host_matching_is_case_insensitive"}, // pattern lower-cased by the parser
		{"*.example.com", "example.com", false, hp + "host_matching_is_case_insensitive"},
		{"*.example.com", "deep.api.example.com", false, hp + "host_matching_is_case_insensitive"},
		{"**.example.com", "deep.api.example.com", true, hp + "host_matching_is_case_insensitive"},
		{"*-api.example.com", "tenant-api.example.com", true, hp + "host_matching_is_case_insensitive"},
		{"*", "deep.api.example.com", false, hp + "host_matching_is_case_insensitive"},
		{"**.example.com", "api.example.com", true, hp + "recursive_wildcard_requires_at_least_one_label"},
		{"**.example.com", "example.com", false, hp + "recursive_wildcard_requires_at_least_one_label"},
		{"api.**.com", "api.x.y.com", true, hp + "recursive_wildcard_requires_at_least_one_label"},
		{"api.**.com", "api.com", false, hp + "recursive_wildcard_requires_at_least_one_label"},
		{"**", "com", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "localhost", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "deep.api.example.com", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "xn--bcher-kva.example", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "192.168.1.1", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "[::1]", true, hp + "universal_wildcard_matches_any_host"},
		{"**", "", false, hp + "universal_wildcard_matches_any_host"},
		{"**", "api.example.com.", false, hp + "universal_wildcard_matches_any_host"},
		{"**", "api..example.com", false, hp + "universal_wildcard_matches_any_host"},
		{"*.example.com", "api.example.com", true, opa + "wildcard_host_matches_subdomain"},
		{"*.example.com", "deep.sub.example.com", false, opa + "wildcard_host_rejects_deep_subdomain"},
		{"*.example.com", "example.com", false, opa + "wildcard_host_rejects_exact_domain"},
		{"*-aiplatform.googleapis.com", "us-central1-aiplatform.googleapis.com", true, opa + "wildcard_host_intra_label_matches"},
		{"*-aiplatform.googleapis.com", "us-central1.aiplatform.googleapis.com", false, opa + "wildcard_host_intra_label_does_not_cross_dot"},
		{"*.s3.*.amazonaws.com", "bucket.s3.us-west-2.amazonaws.com", true, opa + "wildcard_host_middle_label_matches_one_region_label"},
		{"*.s3.*.amazonaws.com", "s3.us-west-2.amazonaws.com", false, opa + "wildcard_host_middle_label_does_not_match_missing_bucket_label"},
		{"*.s3.*.amazonaws.com", "bucket.s3.dualstack.us-west-2.amazonaws.com", false, opa + "wildcard_host_middle_label_does_not_skip_dualstack_label"},
		{"*.example.com", "evil%2eexample.com", false, opa + "wildcard_host_percent_encoded_dot_no_match"},
		{"*-api.example.com", "api.example.com", false, opa + "middleware_chain_uses_dns_label_glob_semantics"},
		// '?' and classes follow the glob crate the pattern labels compile with.
		{"api?.*.example.com", "api1.eu.example.com", true, "glob crate: ? is one character"},
		{"api?.*.example.com", "api.eu.example.com", false, "glob crate: ? is one character"},
		{"api[0-9].*.example.com", "api7.eu.example.com", true, "glob crate: [a-z] range"},
		{"api[!0-9].*.example.com", "api7.eu.example.com", false, "glob crate: [!...] negation"},
	}
	for _, r := range rows {
		p, err := compileHostPattern(r.pattern)
		if err != nil {
			t.Errorf("%s: compile %q: %v", r.src, r.pattern, err)
			continue
		}
		if got := p.match(r.host); got != r.match {
			t.Errorf("%s: %q matches %q = %v, want %v", r.src, r.pattern, r.host, got, r.match)
		}
	}
}

// TestHostPatternCompileErrors: host_pattern.rs
// host_matching_rejects_invalid_patterns.
func TestHostPatternCompileErrors(t *testing.T) {
	for _, p := range []string{"", "api .example.com", "api[.example.com", "*.{prod,staging}.example.com", "api**.example.com"} {
		if _, err := compileHostPattern(p); err == nil {
			t.Errorf("compileHostPattern(%q) succeeded, want an error", p)
		}
	}
}

// TestHostShapes: which hosts a policy may use, derived from
// openshell-policy lib.rs validate_* tests (TldWildcard,
// host_wildcard_shape_invalid) and l7/mod.rs validate_host_wildcard.
func TestHostShapes(t *testing.T) {
	rows := []struct {
		host string
		ok   bool
		src  string
	}{
		{"*.com", false, "lib.rs validate_rejects_tld_wildcard"},
		{"**.com", false, "lib.rs validate_rejects_double_star_tld_wildcard"},
		{"*", false, "lib.rs validate_rejects_all_host_star_wildcards"},
		{"**", false, "lib.rs validate_rejects_all_host_star_wildcards"},
		{"*.example.com", true, "lib.rs validate_accepts_subdomain_wildcard"},
		{"*.s3.*.amazonaws.com", true, "lib.rs validate_accepts_middle_label_star_wildcard"},
		{"api.*-prod.example.com", false, "lib.rs validate_rejects_partial_middle_label_wildcard"},
		{"**.example.com", true, "lib.rs host_wildcard_shape_invalid: ** as the whole first label"},
		{"*-api.example.com", true, "lib.rs host_wildcard_shape_invalid: partial first label"},
		{"api**.example.com", false, "lib.rs host_wildcard_shape_invalid: ** inside the first label"},
		{"api.**.example.com", false, "lib.rs host_wildcard_shape_invalid: ** after the first label"},
		{"*-api.com", true, "lib.rs TldWildcard applies only to hosts starting *. or **."},
		{"api.example.*", true, "lib.rs host_wildcard_shape_invalid: a whole-label * anywhere"},
		{"*.{a,b}.example.com", false, "host_pattern.rs host_matching_rejects_invalid_patterns (braces)"},
		{"*.api[.example.com", false, "host_pattern.rs host_matching_rejects_invalid_patterns (unclosed [)"},
		{"api?.example.com", false, "stockade: ? without * is literal in OpenShell's Rego (matches nothing)"},
	}
	for _, r := range rows {
		_, _, msg := checkHost(r.host)
		if (msg == "") != r.ok {
			t.Errorf("%s: checkHost(%q) = %q, want ok=%v", r.src, r.host, msg, r.ok)
		}
	}
}

const patternPolicy = `version: 1
network_policies:
  vertex:
    name: Vertex AI
    endpoints:
      - { host: "*-aiplatform.googleapis.com", port: 443 }
      - { host: "**.corp.example", port: 443 }
    binaries: [{ path: /usr/bin/curl }]
  s3:
    endpoints:
      - { host: "*.s3.*.amazonaws.com", port: 443 }
      - { host: "*.example.org", port: 443 }
    binaries: [{ path: /usr/bin/aws }]
  exact:
    endpoints:
      - { host: db.corp.example, port: 443 }
    binaries: [{ path: /usr/bin/psql }]
  private:
    endpoints:
      # Its own port: a host-less endpoint overlaps every host on its
      # ports, and overlapping endpoints that disagree on allowed_ips are
      # refused at load (ambiguity.rs).
      - { ports: [9443], allowed_ips: [172.16.0.0/12, 192.168.1.1] }
    binaries: [{ path: /usr/bin/curl }]
`

// TestDecidePatterns: the patterns evaluated by the engine (OPA), with
// host-less allowed_ips endpoints joining every host's candidates.
func TestDecidePatterns(t *testing.T) {
	e := mustEngine(t, patternPolicy)
	runNetCases(t, e, []netCase{
		{"partial first label", NetworkInput{Host: "us-central1-aiplatform.googleapis.com", Port: 443, Exe: "/usr/bin/curl"}, true, reason.None, "vertex"},
		{"partial label not across dot", NetworkInput{Host: "us-central1.aiplatform.googleapis.com", Port: 443, Exe: "/usr/bin/curl"}, false, reason.EndpointNotAllowed, "-"},
		{"any depth", NetworkInput{Host: "a.b.c.corp.example", Port: 443, Exe: "/usr/bin/curl"}, true, reason.None, "vertex"},
		{"middle label", NetworkInput{Host: "bucket.s3.eu-west-1.amazonaws.com", Port: 443, Exe: "/usr/bin/aws"}, true, reason.None, "s3"},
		{"middle label, extra label", NetworkInput{Host: "bucket.s3.dualstack.eu-west-1.amazonaws.com", Port: 9443, Exe: "/usr/bin/aws"}, false, reason.BinaryNotAllowed, "private"}, // only the host-less endpoint
		{"NUL in host (opa.rs wildcard_host_nul_byte_causes_opa_error)", NetworkInput{Host: "sub\x00.example.org", Port: 443, Exe: "/usr/bin/aws"}, false, reason.EndpointNotAllowed, "-"},
		{"exact host also gets patterns", NetworkInput{Host: "db.corp.example", Port: 443, Exe: "/usr/bin/curl"}, true, reason.None, "vertex"},
		{"exact host binary", NetworkInput{Host: "db.corp.example", Port: 443, Exe: "/usr/bin/psql"}, true, reason.None, "exact"},
		{"simple wildcard with patterns", NetworkInput{Host: "www.example.org", Port: 443, Exe: "/usr/bin/aws"}, true, reason.None, "s3"},
		{"hostless any name (opa.rs allowed_ips_mode3_hostless_allows_any_domain)", NetworkInput{Host: "anything.example.com", Port: 9443, Exe: "/usr/bin/curl"}, true, reason.None, "private"},
		{"hostless wrong port (opa.rs allowed_ips_mode3_wrong_port_denied)", NetworkInput{Host: "anything.example.com", Port: 12345, Exe: "/usr/bin/curl"}, false, reason.EndpointNotAllowed, "-"},
		{"hostless wrong binary", NetworkInput{Host: "anything.example.com", Port: 9443, Exe: "/usr/bin/wget"}, false, reason.BinaryNotAllowed, "private"},
	})
	d := e.DecideNetwork(context.Background(), NetworkInput{Host: "anything.example.com", Port: 9443, Exe: "/usr/bin/curl"})
	want := []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.1.1/32")}
	if d.ExactHost || !slices.Equal(d.AllowedIPs, want) { // opa.rs allowed_ips_mode3_returns_allowed_ips, exact_declared_endpoint_host_false_for_hostless_allowed_ips
		t.Errorf("hostless: exact=%v allowedIPs=%v, want false %v", d.ExactHost, d.AllowedIPs, want)
	}
	d = e.DecideNetwork(context.Background(), NetworkInput{Host: "us-central1-aiplatform.googleapis.com", Port: 443, Exe: "/usr/bin/curl"})
	if d.PolicyName != "Vertex AI" || d.Policy != "vertex" {
		t.Errorf("policy %q name %q, want vertex / Vertex AI", d.Policy, d.PolicyName)
	}
	for _, tc := range []struct {
		name   string
		allow  bool
		policy string
	}{
		{"eu-aiplatform.googleapis.com", true, "vertex"},
		{"x.y.corp.example", true, "vertex"},
		{"b.s3.us-east-1.amazonaws.com.", true, "s3"},
		{"s3.us-east-1.amazonaws.com", false, "-"},
		{"anything.example.com", false, "-"}, // host-less endpoints make no name DNS-eligible
	} {
		d := e.DecideDNS(context.Background(), DNSInput{Name: tc.name, QType: 1})
		if d.Allow != tc.allow || d.Policy != tc.policy {
			t.Errorf("DNS %q: %+v, want allow=%v policy=%q", tc.name, d, tc.allow, tc.policy)
		}
	}
}

// TestHostlessAndBareIPs: parse side of host-less endpoints and bare IPs.
func TestHostlessAndBareIPs(t *testing.T) {
	pol, err := Parse("p.yaml", []byte(`version: 1
network_policies:
  p:
    endpoints:
      - { port: 443, allowed_ips: [10.1.2.3, "fd00::1", 10.0.0.0/8] }
    binaries: [{ path: /usr/bin/curl }]
`))
	if err != nil {
		t.Fatal(err)
	}
	ep := pol.NetworkPolicies[0].Endpoints[0]
	want := []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32"), netip.MustParsePrefix("fd00::1/128"), netip.MustParsePrefix("10.0.0.0/8")}
	if ep.Host != "" || !slices.Equal(ep.AllowedIPs, want) {
		t.Errorf("host %q allowed %v, want \"\" %v", ep.Host, ep.AllowedIPs, want)
	}
	for _, bad := range []struct{ src, want string }{
		{`{ port: 443 }`, "1:3: endpoint has no host"},
		{`{ port: 443, allowed_ips: [127.0.0.1] }`, "overlaps loopback"},
	} {
		_, err := Parse("p.yaml", []byte("version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - "+bad.src+"\n    binaries: [{ path: /usr/bin/curl }]\n"))
		if err == nil || !strings.Contains(err.Error(), "p.yaml:5:") || !strings.Contains(err.Error(), strings.TrimPrefix(bad.want, "1:3: ")) {
			t.Errorf("%s: err %v, want p.yaml:5:... %q", bad.src, err, bad.want)
		}
	}
}
