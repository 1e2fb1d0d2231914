package audit

import (
	"path/filepath"
	"testing"

	"github.com/stockade-dev/stockade/policy/reason"
)

// benchDNSEvent is an allowed DNS decision as the boundary's DNS path builds
// it (actors/boundary/dns.go).
func benchDNSEvent() Event {
	e := NewDecision(ClassDNS, true, reason.None)
	e.Sandbox = "sb-7f3a"
	e.Query = &Query{Hostname: "api.github.com", Type: "AAAA", Rcode: "NOERROR"}
	e.Src = &Endpoint{IP: "10.200.0.2", Port: 53124}
	e.Policy = PolicyRef{Name: "github", Version: 42, Engine: "opa"}
	return e
}

// benchNetEvent is a proxied connection's decision as the boundary's
// connection actor builds it (actors/boundary/conn.go).
func benchNetEvent(allowed bool) Event {
	code := reason.None
	if !allowed {
		code = reason.BinaryNotAllowed
	}
	e := NewDecision(ClassNetwork, allowed, code)
	e.Sandbox = "sb-7f3a"
	e.Actor = &Process{Path: "/usr/bin/curl", Pid: 4242, Ancestors: []string{"/usr/bin/bash", "/usr/sbin/sshd"}}
	e.Dst = &Endpoint{Hostname: "api.github.com", Port: 443}
	e.Src = &Endpoint{IP: "10.200.0.2", Port: 40312}
	e.Policy = PolicyRef{Name: "github", PolicyName: "GitHub API", Version: 42, Engine: "opa"}
	e.Unmapped = map[string]string{"identity": "none: endpoint-only matching, binaries ignored"}
	if !allowed {
		e.Message = "binary /usr/bin/curl is not allowed to reach api.github.com:443"
	}
	return e
}

// BenchmarkFileRecord measures File.Record: encoding plus the append to the
// group-commit buffer (allowed events), and the write(2) a denial costs.
func BenchmarkFileRecord(b *testing.B) {
	for _, bc := range []struct {
		name string
		e    Event
	}{
		{"dns-allowed", benchDNSEvent()},
		{"net-allowed", benchNetEvent(true)},
		{"net-denied", benchNetEvent(false)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			af := benchFile(b)
			b.ReportAllocs()
			for b.Loop() {
				af.Record(bc.e)
			}
		})
	}
}

// benchBurst is a burst of DNS decisions as a batching DNS server would
// record them: 16 events, one of them a denial.
func benchBurst() []Event {
	burst := make([]Event, 16)
	for i := range burst {
		burst[i] = benchDNSEvent()
	}
	burst[7] = NewDecision(ClassDNS, false, reason.PolicyDNSIneligible)
	burst[7].Query = &Query{Hostname: "exfil.example", Type: "TXT", Rcode: "REFUSED"}
	return burst
}

// BenchmarkDNSBurst records a burst of 16 DNS decisions with one denial,
// one Record per event (records) or in one RecordBatch (batch); ns/op is
// per burst.
func BenchmarkDNSBurst(b *testing.B) {
	burst := benchBurst()
	b.Run("records", func(b *testing.B) {
		af := benchFile(b)
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range burst {
				af.Record(e)
			}
		}
	})
	b.Run("batch", func(b *testing.B) {
		af := benchFile(b)
		b.ReportAllocs()
		for b.Loop() {
			af.RecordBatch(burst)
		}
	})
}

// benchFile opens an audit file in a temporary directory, closed when b
// ends.
func benchFile(b *testing.B) *File {
	b.Helper()
	af, err := OpenFile(filepath.Join(b.TempDir(), "audit.jsonl"), WithKeep(1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { af.Close() })
	return af
}
