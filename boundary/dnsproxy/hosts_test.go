package dnsproxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

const hostsFile = `# static names
127.0.0.1	localhost
::1		localhost ip6-localhost   # trailing comment

127.0.0.5	Build.Internal cache.internal
127.0.0.6	build.internal
127.0.0.5	build.internal
::ffff:127.0.0.7 mapped.internal
fe80::1%lo	zoned.internal
_svc.internal-x 	 	
`

func TestHostsExchange(t *testing.T) {
	// The last line has an address-less name: it must fail; drop it here.
	h := mustHosts(t, strings.Replace(hostsFile, "_svc.internal-x", "", 1))
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		resp, err := h.Exchange(context.Background(), query(name, qtype))
		if err != nil {
			t.Fatalf("Exchange(%s %s): %v", name, dns.TypeToString[qtype], err)
		}
		return resp
	}
	addrs := func(m *dns.Msg) string {
		var s []string
		for _, rr := range m.Answer {
			switch r := rr.(type) {
			case *dns.A:
				s = append(s, r.A.String())
			case *dns.AAAA:
				s = append(s, r.AAAA.String())
			}
		}
		return strings.Join(s, " ")
	}
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string
	}{
		{"localhost.", dns.TypeA, dns.RcodeSuccess, "127.0.0.1"},
		{"localhost.", dns.TypeAAAA, dns.RcodeSuccess, "::1"},
		{"LOCALHOST.", dns.TypeANY, dns.RcodeSuccess, "127.0.0.1 ::1"},
		{"ip6-localhost.", dns.TypeA, dns.RcodeSuccess, ""},
		{"build.internal.", dns.TypeA, dns.RcodeSuccess, "127.0.0.5 127.0.0.6"},
		{"cache.internal.", dns.TypeA, dns.RcodeSuccess, "127.0.0.5"},
		{"mapped.internal.", dns.TypeA, dns.RcodeSuccess, "127.0.0.7"},
		{"zoned.internal.", dns.TypeAAAA, dns.RcodeSuccess, "fe80::1"},
		{"localhost.", dns.TypeMX, dns.RcodeSuccess, ""},
		{"absent.internal.", dns.TypeA, dns.RcodeNameError, ""},
		{"internal.", dns.TypeA, dns.RcodeNameError, ""},
	} {
		resp := ask(tc.name, tc.qtype)
		if resp.Rcode != tc.rcode || addrs(resp) != tc.want || resp.Id == 0 {
			t.Errorf("%s %s: rcode %s answers %q, want %s %q", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[resp.Rcode], addrs(resp), dns.RcodeToString[tc.rcode], tc.want)
		}
		for _, rr := range resp.Answer {
			if rr.Header().Name != tc.name || rr.Header().Ttl != HostsTTL {
				t.Errorf("%s: record %v", tc.name, rr)
			}
		}
	}

	chaos := query("localhost.", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	two := query("localhost.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	for req, rcode := range map[*dns.Msg]int{chaos: dns.RcodeNameError, two: dns.RcodeFormatError} {
		if resp, err := h.Exchange(context.Background(), req); err != nil || resp.Rcode != rcode {
			t.Errorf("%v: resp %v err %v", req.Question, resp, err)
		}
	}
}

func TestParseHostsErrors(t *testing.T) {
	text := "127.0.0.1 good\n" + // 1
		"127.0.0.300 bad-ip\n" + // 2
		"\n" + // 3
		"127.0.0.2\n" + // 4: no name
		"127.0.0.3 ok bad..name\n" + // 5
		"127.0.0.4 bad!char\n" + // 6
		"# 127.0.0.5\n" + // 7
		"127.0.0.6 " + strings.Repeat("a", 64) + "\n" + // 8: label too long
		"_svc.internal-x\n" // 9: a name where the address goes
	_, err := ParseHosts(strings.NewReader(text), "h.txt")
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, line := range []string{"2", "4", "5", "6", "8", "9"} {
		if !strings.Contains(msg, "h.txt:"+line+": ") {
			t.Errorf("error does not name h.txt:%s:\n%s", line, msg)
		}
	}
	for _, line := range []string{"1", "3", "7"} {
		if strings.Contains(msg, "h.txt:"+line+": ") {
			t.Errorf("error names good line h.txt:%s:\n%s", line, msg)
		}
	}
	if !strings.Contains(msg, `"bad..name" is not a valid host name`) || !strings.Contains(msg, "127.0.0.2 has no host name") {
		t.Errorf("error lacks detail:\n%s", msg)
	}
}

func TestLoadHosts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(p, []byte(strings.Replace(hostsFile, "_svc.internal-x", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := LoadHosts(p)
	if err != nil || h.String() != "hosts:"+p {
		t.Fatalf("LoadHosts = %v, %v", h, err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte(hostsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHosts(bad); err == nil || !strings.Contains(err.Error(), bad+":10: ") {
		t.Errorf("bad file: err %v, want %s:10", err, bad)
	}
	if _, err := LoadHosts(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err %v", err)
	}
}
