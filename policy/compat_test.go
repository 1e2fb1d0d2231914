package policy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The OpenShell compatibility table (compat_cases_test.go): cases derived
// from OpenShell's own tests (snapshot 2f7fb65 of NVIDIA/OpenShell), each row
// citing the test it comes from as "path:test_name". A row is a policy in
// OpenShell v1 format and either a load expectation (rejected, with a
// substring of stockade's error) or queries with their expected decisions.
// Rows where stockade deliberately decides differently say why in differs
// and assert stockade's behaviour.

// compatRow is one case of the table.
type compatRow struct {
	source  string // "path/in/openshell:test_function"
	needs   string // the feature the row depends on: "", hostpattern, allowedips, validation, policykey
	differs string // why stockade deliberately decides differently ("" when it agrees)
	file    string // a file under testdata/compat instead of yaml
	yaml    string
	reject  string // non-empty: loading must fail with an error containing this (case-insensitive)
	queries []compatQuery
}

// compatQuery is one decision asked of a loaded row.
type compatQuery struct {
	host      string
	port      uint16
	exe       string // "" means /usr/bin/curl
	ancestors []string
	noIdent   bool // identity none (OpenShell: binary identity not required)
	dns       bool // a DNS eligibility question for host instead of a network decision
	allow     bool
	policy    string   // the matched policy key when OpenShell asserts it; "" = not checked
	ips       []string // expected AllowedIPs (CIDRs) when non-nil; []string{} = none
	exact     *bool    // expected ExactHost when non-nil
}

var (
	exactYes = ptr(true)
	exactNo  = ptr(false)
)

func ptr[T any](v T) *T { return &v }

// compatSources lists the source files in report order.
var compatSources = []string{
	"crates/openshell-supervisor-network/src/opa.rs",
	"crates/openshell-policy/src/lib.rs",
	"crates/openshell-policy/src/l7_validate.rs",
	"crates/openshell-policy/src/ambiguity.rs",
	"crates/openshell-supervisor-network/src/proxy/destination.rs",
	"crates/openshell-core/src/host_pattern.rs",
	"e2e/python/test_sandbox_policy.py",
}

func TestOpenShellCompat(t *testing.T) {
	rows := compatTable()
	count := map[string]int{}
	for _, r := range rows {
		file, _, ok := strings.Cut(r.source, ":")
		if !ok || !slices.Contains(compatSources, file) {
			t.Fatalf("row %q: source must be one of the listed files and name a test", r.source)
		}
		switch r.needs {
		case "", "hostpattern", "allowedips", "validation", "policykey":
		default:
			t.Fatalf("row %q: unknown needs %q", r.source, r.needs)
		}
		if r.reject != "" && len(r.queries) > 0 {
			t.Fatalf("row %q: a rejected policy has no queries", r.source)
		}
		count[file]++
	}
	for _, f := range compatSources {
		t.Logf("compat: %s: %d rows", f, count[f])
	}
	t.Logf("compat: total: %d rows", len(rows))
	failed, byNeeds, failedNeeds := map[string]int{}, map[string]int{}, map[string]int{}
	for _, r := range rows {
		file, _, _ := strings.Cut(r.source, ":")
		byNeeds[r.needs]++
		if !t.Run(r.source, func(t *testing.T) { runCompatRow(t, r) }) {
			failed[file]++
			failedNeeds[r.needs]++
		}
	}
	for _, f := range compatSources {
		t.Logf("compat: %s: %d rows, %d pass, %d fail", f, count[f], count[f]-failed[f], failed[f])
	}
	for _, n := range []string{"", "hostpattern", "allowedips", "validation", "policykey"} {
		t.Logf("compat: needs=%q: %d rows, %d pass, %d fail", n, byNeeds[n], byNeeds[n]-failedNeeds[n], failedNeeds[n])
	}
}

func runCompatRow(t *testing.T, r compatRow) {
	data := []byte(r.yaml)
	name := "compat.yaml"
	if r.file != "" {
		data = compatFile(t, r.file)
		name = r.file
	}
	tag := fmt.Sprintf("[needs=%q]", r.needs)
	if r.differs != "" {
		tag += fmt.Sprintf(" [differs: %s]", r.differs)
	}
	e := NewEngine()
	_, err := e.Load(name, data)
	if r.reject != "" {
		if err == nil {
			t.Fatalf("%s %s\nload: got ok, want rejected with %q\npolicy:\n%s", r.source, tag, r.reject, data)
		}
		var list ErrorList
		if !errors.As(err, &list) || len(list) == 0 {
			t.Fatalf("%s %s\nload: got %T %v, want an ErrorList", r.source, tag, err, err)
		}
		for _, le := range list {
			if le.File != name || le.Line < 1 {
				t.Errorf("%s %s\nload error without file:line: %v", r.source, tag, le)
			}
		}
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(r.reject)) {
			t.Errorf("%s %s\nload: got error\n%v\nwant it to contain %q", r.source, tag, err, r.reject)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s %s\nload: got error\n%v\nwant ok; policy:\n%s", r.source, tag, err, data)
	}
	ctx := context.Background()
	for _, q := range r.queries {
		var d Decision
		var what string
		if q.dns {
			d = e.DecideDNS(ctx, DNSInput{Name: q.host, QType: 1})
			what = fmt.Sprintf("DNS %q", q.host)
		} else {
			exe := q.exe
			if exe == "" && !q.noIdent {
				exe = "/usr/bin/curl"
			}
			d = e.DecideNetwork(ctx, NetworkInput{Host: q.host, Port: q.port, Exe: exe, Ancestors: q.ancestors, IdentityNone: q.noIdent})
			what = fmt.Sprintf("%q:%d exe=%q ancestors=%q identityNone=%v", q.host, q.port, exe, q.ancestors, q.noIdent)
		}
		var bad []string
		if d.Allow != q.allow {
			bad = append(bad, fmt.Sprintf("allow=%v want %v", d.Allow, q.allow))
		}
		if q.policy != "" && d.Policy != q.policy {
			bad = append(bad, fmt.Sprintf("policy=%q want %q", d.Policy, q.policy))
		}
		if q.ips != nil {
			got := make([]string, len(d.AllowedIPs))
			for i, p := range d.AllowedIPs {
				got[i] = p.String()
			}
			want := make([]string, len(q.ips))
			for i, s := range q.ips {
				want[i] = netip.MustParsePrefix(s).String()
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				bad = append(bad, fmt.Sprintf("allowedIps=%v want %v", got, want))
			}
		}
		if q.exact != nil && d.ExactHost != *q.exact {
			bad = append(bad, fmt.Sprintf("exactHost=%v want %v", d.ExactHost, *q.exact))
		}
		if len(bad) > 0 {
			t.Errorf("%s %s\nquery %s: %s\n(decision: reason=%q policy=%q message=%q)",
				r.source, tag, what, strings.Join(bad, ", "), d.Reason, d.Policy, d.Message)
		}
	}
}

// Helpers that write small OpenShell v1 policies.

// doc is a policy: version 1, then the given top-level YAML, then the
// network policy blocks (each from np) under network_policies.
func compatDoc(top string, blocks ...string) string {
	var b strings.Builder
	b.WriteString("version: 1\n")
	b.WriteString(top)
	if len(blocks) > 0 {
		b.WriteString("network_policies:\n")
		for _, bl := range blocks {
			b.WriteString(bl)
		}
	}
	return b.String()
}

// np is one network policy under key (named key too): endpoints are YAML
// flow mappings or indented block mappings starting with "host:"/"port:";
// binaries are paths.
func compatNP(key string, endpoints []string, binaries ...string) string {
	return compatNPNamed(key, key, endpoints, binaries...)
}

func compatNPNamed(key, name string, endpoints []string, binaries ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    name: %s\n    endpoints:\n", key, name)
	for _, ep := range endpoints {
		lines := strings.Split(strings.TrimRight(ep, "\n"), "\n")
		for i, l := range lines {
			if i == 0 {
				fmt.Fprintf(&b, "      - %s\n", l)
			} else {
				fmt.Fprintf(&b, "        %s\n", l)
			}
		}
	}
	if len(binaries) > 0 {
		b.WriteString("    binaries:\n")
		for _, p := range binaries {
			fmt.Fprintf(&b, "      - { path: %q }\n", p)
		}
	}
	return b.String()
}

func compatEPs(e ...string) []string { return e }

// process is a top-level process section.
func compatProcess(user, group string) string {
	s := "process:\n"
	if user != "" {
		s += fmt.Sprintf("  run_as_user: %q\n", user)
	}
	if group != "" {
		s += fmt.Sprintf("  run_as_group: %q\n", group)
	}
	if user == "" && group == "" {
		s = "process: {}\n"
	}
	return s
}

// restrictiveFS is OpenShell's restrictive_default_policy filesystem and
// landlock sections.
const restrictiveFS = `filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /app, /etc, /var/log]
  read_write: [/tmp, /dev/null]
landlock:
  compatibility: best_effort
`

// e2eBase is the e2e tests' _base_policy sections.
const e2eBase = `filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /etc, /app, /var/log, /proc, /dev/urandom]
  read_write: [/sandbox, /tmp]
landlock:
  compatibility: best_effort
process:
  run_as_user: sandbox
  run_as_group: sandbox
`
