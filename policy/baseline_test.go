package policy

import (
	"slices"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

func TestBaselineAdds(t *testing.T) {
	// No filesystem_policy: the whole baseline.
	p := mustParse(t, "version: 1\n")
	if got := p.BaselineAdds(); !slices.Equal(got.ReadOnly, Baseline().ReadOnly) || !slices.Equal(got.ReadWrite, Baseline().ReadWrite) {
		t.Fatalf("network-only policy: %+v", got)
	}
	for _, must := range []string{"/usr", "/bin", "/lib", "/etc", "/proc", "/dev/urandom"} {
		if !slices.Contains(Baseline().ReadOnly, must) {
			t.Errorf("baseline read-only lacks %s", must)
		}
	}
	for _, must := range []string{"/tmp", "/sandbox", "/dev/null"} {
		if !slices.Contains(Baseline().ReadWrite, must) {
			t.Errorf("baseline read-write lacks %s", must)
		}
	}
	// The policy's own lists win: /usr listed read-write stays so (not
	// added read-only), /sandbox/docs read-only keeps /sandbox from being
	// added read-write, /tmp listed is not added again.
	p = mustParse(t, "version: 1\nfilesystem_policy:\n  read_only: [/etc, /sandbox/docs]\n  read_write: [/usr, /tmp]\n")
	got := p.BaselineAdds()
	for _, x := range []string{"/usr", "/etc"} {
		if slices.Contains(got.ReadOnly, x) {
			t.Errorf("baseline adds %s read-only though the policy lists it", x)
		}
	}
	for _, x := range []string{"/sandbox", "/tmp"} {
		if slices.Contains(got.ReadWrite, x) {
			t.Errorf("baseline adds %s read-write: %+v", x, got)
		}
	}
	if !slices.Contains(got.ReadOnly, "/bin") || !slices.Contains(got.ReadWrite, "/var/tmp") {
		t.Errorf("baseline adds %+v, want /bin and /var/tmp among them", got)
	}
}

func TestBoundaryWarningsAndLoopbackHosts(t *testing.T) {
	p := mustParse(t, `version: 1
network_policies:
  local:
    name: local
    endpoints:
      - { host: 127.0.0.1, port: 18080 }
      - { host: localhost, port: 80 }
      - { host: 10.0.0.5, port: 443, allowed_ips: [10.1.0.0/16] }
      - { host: 10.0.0.6, port: 443 }
      - { host: 169.254.169.254, port: 80 }
      - { host: api.example.com, port: 6443 }
      - { host: api.example.com, port: 443 }
    binaries: [{ path: /usr/bin/curl }]
`)
	var lines []string
	for _, n := range p.BoundaryWarnings() {
		lines = append(lines, n.String())
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		"p.yaml:6:9: warning: network_policies.local: endpoint 127.0.0.1: a loopback address",
		"stockade gateway run --allow-loopback-upstream",
		"endpoint localhost: a loopback address",
		"endpoint 10.0.0.5: 10.0.0.5 is not in the endpoint's own allowed_ips, so the boundary refuses it: add 10.0.0.5/32 to allowed_ips",
		"endpoint 169.254.169.254: a link-local or metadata address: the boundary never dials it",
		"endpoint api.example.com: port 6443 is a control-plane port",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if len(lines) != 5 {
		t.Errorf("%d warnings, want 5 (10.0.0.6 named exactly and api.example.com:443 are allowed):\n%s", len(lines), all)
	}
	if got := p.LoopbackHosts(); !slices.Equal(got, []string{"127.0.0.1", "localhost"}) {
		t.Errorf("LoopbackHosts = %q", got)
	}
	if got := mustParse(t, "version: 1\n").LoopbackHosts(); len(got) != 0 {
		t.Errorf("LoopbackHosts of a policy without endpoints = %q", got)
	}
}
