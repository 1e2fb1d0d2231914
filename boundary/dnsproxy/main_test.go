package dnsproxy

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeDecider is the policy seam: it allows the names in allow and answers
// deny for the others, recording every name it was asked about.
type fakeDecider struct {
	allow map[string]bool
	deny  Verdict

	mu    sync.Mutex
	asked []string
}

func allowing(names ...string) *fakeDecider {
	d := &fakeDecider{allow: map[string]bool{}}
	for _, n := range names {
		d.allow[n] = true
	}
	return d
}

func (d *fakeDecider) DecideDNS(_ context.Context, name string, _ uint16) Verdict {
	d.mu.Lock()
	d.asked = append(d.asked, name)
	d.mu.Unlock()
	if d.allow[name] {
		return Verdict{Allow: true, Policy: "test-policy", Version: 7}
	}
	return d.deny
}

func (d *fakeDecider) Asked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

func query(name string, qtype uint16) *dns.Msg {
	return new(dns.Msg).SetQuestion(name, qtype)
}

func mustHosts(t testing.TB, text string) *Hosts {
	t.Helper()
	h, err := ParseHosts(strings.NewReader(text), "test")
	if err != nil {
		t.Fatalf("ParseHosts: %v", err)
	}
	return h
}

// roundTrip packs and unpacks m as the server and the client would.
func roundTrip(t testing.TB, m *dns.Msg) (*dns.Msg, int) {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack reply: %v\n%v", err, m)
	}
	got := new(dns.Msg)
	if err := got.Unpack(b); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	return got, len(b)
}
