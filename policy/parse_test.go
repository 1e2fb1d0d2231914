package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// at names an expected position by line and the first occurrence of a token
// on that line (col = its byte offset + 1), so cases stay readable.
type at struct {
	line  int
	token string
	msg   string // substring of the message
}

func (a at) pos(t *testing.T, src string) (int, int) {
	t.Helper()
	lines := strings.Split(src, "\n")
	if a.line < 1 || a.line > len(lines) {
		t.Fatalf("line %d out of range", a.line)
	}
	i := strings.Index(lines[a.line-1], a.token)
	if i < 0 {
		t.Fatalf("token %q not on line %d: %q", a.token, a.line, lines[a.line-1])
	}
	return a.line, i + 1
}

const validTail = `
    binaries:
      - { path: /usr/bin/curl }
`

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []at
	}{{
		name: "unknown key in endpoint with suggestion",
		src: `version: 1
network_policies:
  p:
    endpoints:
      - hots: a.example.com
        port: 443` + validTail,
		want: []at{
			{5, "hots", `unknown key "hots" in endpoint; valid keys: host, port, ports, allowed_ips, protocol`},
			{5, "hots", `did you mean "host"?`},
			{5, "hots", "endpoint has no host"},
		},
	}, {
		name: "unknown top-level key",
		src:  "version: 1\nnetwrok_policies: {}\n",
		want: []at{{2, "netwrok", `unknown key "netwrok_policies" in policy; valid keys: version, filesystem_policy, landlock, process, network_policies, network_middlewares, stockade; did you mean "network_policies"?`}},
	}, {
		name: "stockade extension: unknown key, wrong type",
		src:  "version: 1\nstockade:\n  allow_ptrace: yes please\n  allow_ptraces: true\n",
		want: []at{
			{3, "yes please", "stockade.allow_ptrace: want true or false"},
			{4, "allow_ptraces", `unknown key "allow_ptraces" in stockade; valid keys: allow_ptrace; did you mean "allow_ptrace"?`},
		},
	}, {
		name: "wrong types",
		src: `version: "1"
filesystem_policy:
  include_workdir: yes please
  read_only: /usr
network_policies:
  p:
    endpoints:
      - { host: a.example.com, port: "443" }
      - { host: [a], port: 443 }` + validTail,
		want: []at{
			{1, `"1"`, `version: want an integer, got string "1"`},
			{3, "yes", `filesystem_policy.include_workdir: want true or false, got string "yes please"`},
			{4, "/usr", `filesystem_policy.read_only: want a list, got string "/usr"`},
			{8, `"443"`, `port: want an integer, got string "443"`},
			{9, "[a]", "host: want a string, got a list"},
		},
	}, {
		name: "version not 1",
		src:  "version: 2\n",
		want: []at{{1, "2", "unsupported version 2; the only valid version is 1"}},
	}, {
		name: "missing version",
		src:  "network_policies: {}\n",
		want: []at{{1, "network", `missing required key "version"`}},
	}, {
		name: "filesystem paths",
		src: `version: 1
filesystem_policy:
  read_only: [usr/lib, /usr/../etc, ""]
  read_write:
    - /
    - //
    - /sandbox/../../etc
`,
		want: []at{
			{3, "usr/lib", `relative path "usr/lib"; paths must be absolute`},
			{3, "/usr/..", `path "/usr/../etc" contains ".."`},
			{3, `""`, "empty path"},
			{5, "/", `"/" would make the whole filesystem writable`},
			{6, "//", `"/" would make the whole filesystem writable`},
			{7, "/sandbox", `contains ".."`},
		},
	}, {
		name: "hosts",
		src: `version: 1
network_policies:
  p:
    endpoints:
      - { host: "*", port: 443 }
      - { host: "*.com", port: 443 }
      - { host: "api.*-x.example.com", port: 443 }
      - { host: "api**.example.com", port: 443 }
      - { host: "api.**.example.com", port: 443 }
      - { host: "https://api.example.com", port: 443 }
      - { host: "api.example.com:443", port: 443 }
      - { host: "a..example.com", port: 443 }
      - { host: "a b.example.com", port: 443 }
      - { host: "", port: 443 }
      - { host: "*.0.0.7", port: 443 }
      - { host: "10.0.0.256", port: 443 }` + validTail,
		want: []at{
			{5, `"*"`, `host "*" would allow every host`},
			{6, `"*.com"`, `host "*.com" is a top-level-domain wildcard`},
			{7, `"api.*`, "after the first label a wildcard must be a whole label '*'"},
			{8, `"api**`, "'**' must be the whole first label"},
			{9, `"api.**`, "'**' is allowed only as the whole first label"},
			{10, `"https`, "must be a bare host name, not a URL"},
			{11, `"api.example.com:443"`, "must not carry a port"},
			{12, `"a..`, "has an empty label"},
			{13, `"a b`, `label "a b" may hold only letters`},
			{14, `""`, "host is empty"},
			{15, `"*.0`, "its last label is numeric"},
			{16, `"10.`, "its last label is numeric"},
		},
	}, {
		name: "ports",
		src: `version: 1
network_policies:
  p:
    endpoints:
      - { host: a.example.com, port: 0 }
      - { host: b.example.com, port: 65536 }
      - { host: c.example.com, ports: [443, -1] }
      - { host: d.example.com, ports: [] }
      - { host: e.example.com, port: 443, ports: [80] }
      - { host: f.example.com }` + validTail,
		want: []at{
			{5, "0 }", "port 0 out of range; valid ports are 1-65535"},
			{6, "65536", "port 65536 out of range"},
			{7, "-1", "port -1 out of range"},
			{8, "ports", "ports is empty"},
			{9, "ports", "endpoint has both port and ports"},
			{10, "{", "endpoint has no port; add port: 443 or ports: [80, 443]"},
		},
	}, {
		name: "no endpoints, empty policy, bad binaries",
		src: `version: 1
network_policies:
  noeps:
    binaries: [{ path: /usr/bin/curl }]
  empty:
  badbins:
    endpoints: [{ host: a.example.com, port: 443 }]
    binaries:
      - { path: bin/curl }
      - { path: "/usr/bin/{a*" }
      - { harness: true }
      - ~
      - /usr/bin/curl
`,
		want: []at{
			{3, "noeps", `network policy "noeps" has no endpoints`},
			{5, "empty", `network policy "empty" is empty`},
			{9, "bin/curl", `binary path: relative path "bin/curl"`},
			{10, `"/usr/bin/{`, "is not a valid glob"},
			{11, "{", "binary has no path"},
			{12, "~", "binary entry is empty"},
			{13, "/usr/bin/curl", "binary: want a mapping, got string"},
		},
	}, {
		name: "allowed_ips",
		src: `version: 1
network_policies:
  p:
    endpoints:
      - host: db.example.com
        port: 5432
        allowed_ips: [10.0.0.x, 127.0.0.0/8, 0.0.0.0/0, "::1/128", "::ffff:127.0.0.1/128", 10.1.0.0/16, fe80::/10]` + validTail,
		want: []at{
			{7, "10.0.0.x,", `allowed_ips: "10.0.0.x" is not a CIDR or an IP address`},
			{7, "127.0.0.0/8", "allowed_ips: 127.0.0.0/8 overlaps loopback"},
			{7, "0.0.0.0/0", "allowed_ips: 0.0.0.0/0 overlaps loopback"},
			{7, `"::1/128"`, "overlaps loopback ::1/128"},
			{7, `"::ffff`, "overlaps loopback ::ffff:127.0.0.0/104"},
		},
	}, {
		name: "landlock, process, duplicate key, unenforced field type",
		src: `version: 1
landlock:
  compatibility: strict
process:
  run_as_user: {name: x}
network_policies:
  p:
    endpoints:
      - host: a.example.com
        host: b.example.com
        port: 443
        rules: GET
        tls: [terminate]` + validTail,
		want: []at{
			{3, "strict", `landlock.compatibility: invalid value "strict"; valid values: best_effort, hard_requirement`},
			{5, "{", "process.run_as_user: want a string, got a mapping"},
			{10, "host", `duplicate key "host" in endpoint`},
			{12, "GET", `rules: want a list, got string "GET"`},
			{13, "[", "tls: want a string, got a list"},
		},
	}, {
		name: "one error per wrong type",
		src:  "version: 1\nlandlock: {compatibility: [best_effort]}\n",
		want: []at{{2, "[", "landlock.compatibility: want a string, got a list"}},
	}, {
		name: "yaml syntax error",
		src:  "version: 1\nnetwork_policies:\n  p: [\n",
		want: []at{{3, "", "did not find expected node content"}},
	}, {
		name: "empty file",
		src:  "# only a comment\n",
		want: []at{{1, "#", "empty policy"}},
	}, {
		name: "two documents",
		src:  "version: 1\n---\nversion: 1\n",
		want: []at{{2, "---", "one YAML document"}},
	}, {
		name: "not a mapping",
		src:  "- version: 1\n",
		want: []at{{1, "-", "policy: want a mapping, got a list"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.src))
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("want ErrorList, got %v", err)
			}
			for _, w := range tc.want {
				line, col := w.pos(t, tc.src)
				if w.token == "" { // the YAML parser reports a line only
					col = 0
				}
				found := false
				for _, e := range list {
					if e.File == "p.yaml" && e.Line == line && e.Col == col && strings.Contains(e.Msg, w.msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("missing error at %d:%d containing %q; got:\n%v", line, col, w.msg, list)
				}
			}
			// Every error is reported once: distinct expectations at the same
			// position may share one error.
			if len(list) > len(tc.want) {
				t.Errorf("got %d errors, want at most %d:\n%v", len(list), len(tc.want), list)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := Parse("dir/policy.yaml", []byte("version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - { hots: x.example.com, port: 443 }\n    binaries: [{path: /usr/bin/curl}]\n"))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("want 2 errors, got %v", err)
	}
	// Sorted by position: the endpoint (5:9) before its key (5:11).
	want := `dir/policy.yaml:5:11: unknown key "hots" in endpoint`
	if got := list[1].Error(); !strings.HasPrefix(got, want) || list[0].Col != 9 {
		t.Errorf("Error() = %q, want prefix %q", got, want)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 2 || lines[1] != list[1].Error() {
		t.Errorf("ErrorList.Error() = %q, want one error per line", err.Error())
	}
	if got := (&Error{File: "f", Line: 3, Msg: "m"}).Error(); got != "f:3: m" {
		t.Errorf("line-only error = %q, want f:3: m", got)
	}
}

func TestAliasExpansionBounded(t *testing.T) {
	// Walked aliases: 1000 policies share one list of 300 endpoints.
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n  p0:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints: &eps\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "      - {host: h%d.example.com, port: 443}\n", i)
	}
	for i := 1; i < 1000; i++ {
		fmt.Fprintf(&b, "  p%d: {binaries: [{path: /usr/bin/curl}], endpoints: *eps}\n", i)
	}
	_, err := Parse("wide.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || !strings.Contains(list[0].Msg, "policy too large") {
		t.Errorf("want one 'policy too large' error, got %v", err)
	}
	// Decoded (kept, unenforced) values: a nested alias bomb.
	b.Reset()
	b.WriteString("version: 1\nx: &a0 [a, a, a, a, a, a, a, a, a, a]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("network_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n      - {host: a.example.com, port: 443, rules: *a8}\n")
	_, err = Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "rules:") {
		t.Errorf("want a rules error for the alias bomb, got %v", err)
	}
}

func TestNotices(t *testing.T) {
	src := `version: 1
network_middlewares:
  guard: { middleware: x }
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        tls: terminate
        enforcement: enforce
        access: read-only
        deny_rules: [{ method: POST, path: "/x" }]
        credential_signing: sigv4
        signing_service: execute-api
      - { host: redis.example.com, port: 6379, protocol: tcp }
    binaries:
      - { path: /usr/bin/curl, harness: true }
  nobins:
    endpoints: [{ host: a.example.com, port: 443 }]
`
	pol, err := Parse("n.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []at{
		{3, "guard", "network_middlewares.guard accepted, not enforced"},
		{9, "protocol", "protocol: rest accepted, not enforced"},
		{10, "tls", "tls: terminate accepted, not enforced: TLS is passed through"},
		{11, "enforcement", "enforcement: enforce accepted, not enforced"},
		{12, "access", "access: read-only accepted, not enforced"},
		{13, "deny_rules", "deny_rules accepted, not enforced: L7 inspection is not implemented"},
		{14, "credential_signing", "credential_signing: sigv4 accepted, not enforced: credential"},
		{15, "signing_service", "signing_service: execute-api accepted, not enforced: credential"},
		{18, "harness", "harness accepted, not enforced"},
		{19, "nobins", `network policy "nobins" has no binaries`},
	}
	notices := pol.Notices()
	if len(notices) != len(want) {
		t.Errorf("got %d notices, want %d:\n%v", len(notices), len(want), notices)
	}
	for i, w := range want {
		line, col := w.pos(t, src)
		if i >= len(notices) {
			break
		}
		n := notices[i]
		if n.Line != line || n.Col != col || !strings.Contains(n.Msg, w.msg) || n.File != "n.yaml" {
			t.Errorf("notice %d = %v, want %d:%d %q", i, n, line, col, w.msg)
		}
	}
	// Kept, not dropped.
	ep := pol.NetworkPolicies[0].Endpoints[0]
	if ep.Protocol != "rest" || ep.TLS != "terminate" || ep.Enforcement != "enforce" || ep.Access != "read-only" {
		t.Errorf("endpoint fields not kept: %+v", ep)
	}
	if len(ep.Unenforced) != 3 || ep.Unenforced[0].Key != "deny_rules" || ep.Unenforced[1].Value != "sigv4" {
		t.Errorf("unenforced fields = %+v", ep.Unenforced)
	}
	rules, _ := ep.Unenforced[0].Value.([]any)
	if len(rules) != 1 {
		t.Errorf("rules value = %#v", ep.Unenforced[0].Value)
	}
	if len(pol.Middlewares) != 1 || pol.Middlewares[0].Key != "guard" {
		t.Errorf("middlewares = %+v", pol.Middlewares)
	}
}

// TestStockadeExtensions: the "stockade" section (stockade's own keys)
// sets allow_ptrace where the file says so, and only there; a policy
// without it denies ptrace (the zero value).
func TestStockadeExtensions(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want Extensions
	}{
		{"version: 1\n", Extensions{}},
		{"version: 1\nstockade:\n  allow_ptrace: true\n", Extensions{AllowPtrace: true, AllowPtraceAt: Position{Line: 3, Col: 3}}},
		{"version: 1\nstockade: { allow_ptrace: false }\n", Extensions{AllowPtraceAt: Position{Line: 2, Col: 13}}},
		{"version: 1\nstockade: {}\n", Extensions{}},
	} {
		pol, err := Parse("x.yaml", []byte(tc.src))
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		if pol.Stockade != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.src, pol.Stockade, tc.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	src := `version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr]
  read_write: [/sandbox]
landlock: { compatibility: hard_requirement }
process: { run_as_user: 1000, run_as_group: sandbox }
network_policies:
  db:
    name: Database
    endpoints:
      - { host: "*.DB.Example.com.", ports: [5432, 5433, 5432], allowed_ips: [10.1.2.3/8] }
      - { host: 10.0.0.7, port: 6379 }
    binaries: [{ path: "/opt/**/psql" }, { path: /usr/bin/psql }]
  plain:
    endpoints: [{ host: a.example.com, port: 443 }]
    binaries: [{ path: /usr/bin/curl }]
`
	pol, err := Parse("v.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if pol.Version != 1 || pol.Filesystem == nil || !pol.Filesystem.IncludeWorkdir ||
		pol.Filesystem.ReadOnly[0] != "/usr" || pol.Filesystem.ReadWrite[0] != "/sandbox" {
		t.Errorf("filesystem = %+v", pol.Filesystem)
	}
	if pol.Landlock.Compatibility != HardRequirement || pol.Landlock.Compatibility.String() != "hard_requirement" {
		t.Errorf("landlock = %v", pol.Landlock.Compatibility)
	}
	if pol.Process.RunAsUser != "1000" || pol.Process.RunAsGroup != "sandbox" {
		t.Errorf("process = %+v", pol.Process)
	}
	db := pol.NetworkPolicies[0]
	if db.Key != "db" || db.Name != "Database" || pol.NetworkPolicies[1].Name != "plain" {
		t.Errorf("names = %q %q %q", db.Key, db.Name, pol.NetworkPolicies[1].Name)
	}
	ep := db.Endpoints[0]
	if ep.Host != "*.db.example.com" || !ep.Wildcard || len(ep.Ports) != 2 || ep.AllowedIPs[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("endpoint = %+v", ep)
	}
	if db.Endpoints[1].Host != "10.0.0.7" || db.Endpoints[1].Wildcard {
		t.Errorf("ip endpoint = %+v", db.Endpoints[1])
	}
	if !db.Binaries[0].Glob || db.Binaries[1].Glob {
		t.Errorf("binaries = %+v", db.Binaries)
	}
	if pol.EndpointCount() != 3 {
		t.Errorf("EndpointCount = %d", pol.EndpointCount())
	}
	def, err := Parse("d.yaml", []byte("version: 1\n"))
	if err != nil || def.Landlock.Compatibility != BestEffort || def.Filesystem != nil {
		t.Errorf("defaults: %+v %v", def, err)
	}
}

// TestCompatPoliciesLoad: every OpenShell policy in testdata/compat loads.
func TestCompatPoliciesLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/compat/*.yaml")
	if err != nil || len(files) != 13 {
		t.Fatalf("want the 13 compat policies, got %d (%v)", len(files), err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewEngine().Load(filepath.Base(f), data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestYAMLSyntaxErrorLine: a YAML syntax error names the line that is
// wrong, not the line yaml.v3 names (the start of the enclosing mapping,
// minus one, for "did not find expected key").
func TestYAMLSyntaxErrorLine(t *testing.T) {
	cases := []struct {
		name, src string
		line      int
		msg       string
		yamlSays  string // what yaml.v3 itself reports, checked so the test notices when it changes
	}{{
		name: "key mis-indented under a list item",
		src: "version: 1\n" +
			"network_policies:\n" +
			"  api:\n" +
			"    name: api\n" +
			"    endpoints:\n" +
			"      - host: api.example.test\n" +
			"     port: 443\n" + // line 7: one column left of "host"
			"    binaries: [{path: /usr/bin/curl}]\n",
		line: 7, msg: "did not find expected key", yamlSays: "yaml: line 3: did not find expected key",
	}, {
		name: "list item mis-indented",
		src: "version: 1\n" +
			"filesystem_policy:\n" +
			"  read_only:\n" +
			"    - /usr\n" +
			"  read_write:\n" +
			"    - /tmp\n" +
			"   - /var\n", // line 7
		line: 7, msg: "did not find expected key", yamlSays: "yaml: line 2: did not find expected key",
	}, {
		name: "tab indentation",
		src:  "version: 1\nnetwork_policies:\n  api:\n    name: api\n    endpoints:\n      - host: a\n\tport: 443\n",
		line: 7, msg: "tab character", yamlSays: "yaml: line 6: found a tab character that violates indentation",
	}, {
		name: "yaml.v3 right already",
		src:  "version: 1\nnetwork_policies:\n  api:\n    name: api\n    endpoints:\n      - host: a\n          port: 443\n",
		line: 7, msg: "mapping values are not allowed", yamlSays: "yaml: line 7: mapping values are not allowed in this context",
	}, {
		// A prefix cut inside the flow list (lines 3-4) fails too; the
		// error is the unterminated quote on line 6.
		name: "multi-line flow list before the error",
		src:  "version: 1\nlandlock: {compatibility:\n  best_effort}\nnetwork_policies:\n  api:\n    name: \"api\n",
		line: 6, msg: "found unexpected end of stream",
	}, {
		name: "second document",
		src:  "version: 1\n---\na: b\n  c: d\n",
		line: 4, msg: "mapping values are not allowed",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.yamlSays != "" {
				var n yaml.Node
				if err := yaml.Unmarshal([]byte(tc.src), &n); err == nil || err.Error() != tc.yamlSays {
					t.Errorf("yaml.v3 says %v, want %q (this test documents it)", err, tc.yamlSays)
				}
			}
			_, err := Parse("p.yaml", []byte(tc.src))
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("want ErrorList, got %v", err)
			}
			e := list[0]
			if e.Line != tc.line || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %v, want line %d containing %q", list, tc.line, tc.msg)
			}
			if want := fmt.Sprintf("p.yaml:%d: ", tc.line); !strings.HasPrefix(e.Error(), want) {
				t.Errorf("error %q does not start with %q", e.Error(), want)
			}
		})
	}
}

// A large file with a syntax error near its start keeps a line (yaml.v3's
// when re-parsing would cost too much) and does not take long.
func TestYAMLSyntaxErrorLineLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n  api:\n    name: api\n    endpoints:\n      - host: a\n     port: 443\n")
	for b.Len() < 2<<20 {
		b.WriteString("# padding padding padding padding padding padding padding padding\n")
	}
	start := time.Now()
	_, err := Parse("big.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Line < 1 {
		t.Fatalf("want one error with a line, got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
}
