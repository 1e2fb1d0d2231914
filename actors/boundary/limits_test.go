package boundary_test

import (
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/proxy"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// TestConnectionLimit: past MaxConns open connections a client gets 503
// connection_limit (audited) at once; a slot freed is served again.
func TestConnectionLimit(t *testing.T) {
	const limit = 8
	e := startEnv(t, envOpts{identityNone: true, maxConns: limit})
	var held []net.Conn
	for range limit {
		code, body, c := e.connect(t, "up.test", e.echoPort)
		if code != 200 {
			t.Fatalf("tunnel under the limit: %d %s", code, body)
		}
		held = append(held, c)
	}
	start := time.Now()
	code, body, _ := e.connect(t, "up.test", e.echoPort)
	var d proxy.Denial
	if code != 503 || json.Unmarshal([]byte(body), &d) != nil || d.Reason != reason.ConnectionLimit {
		t.Fatalf("over the limit: %d %s, want 503 connection_limit", code, body)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the refusal took %s", took)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return e.audit.count(audit.ClassNetwork, reason.ConnectionLimit) == 1 },
		"the refusal to be audited once")
	_ = held[0].Close()
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, c := e.connect(t, "up.test", e.echoPort)
		if c != nil {
			_ = c.Close()
		}
		return code == 200
	}, "a freed slot to be served")
	for _, c := range held[1:] {
		_ = c.Close()
	}
}

// TestDNSInFlightLimit: past MaxConns queries in flight (held by a delayed
// answer), a query gets REFUSED, audited as connection_limit; every query
// gets an answer.
func TestDNSInFlightLimit(t *testing.T) {
	const limit = 4
	e := startEnv(t, envOpts{identityNone: true, maxConns: limit})
	if _, err := e.faults.Apply("dns.query=delay/1s:" + "100"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	rcodes := make(chan int, 3*limit)
	for range 3 * limit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := new(dns.Msg)
			m.SetQuestion("up.test.", dns.TypeA)
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			r, _, err := c.Exchange(m, e.dns)
			if err != nil {
				rcodes <- -1
				return
			}
			rcodes <- r.Rcode
		}()
	}
	wg.Wait()
	close(rcodes)
	refused, answered := 0, 0
	for rc := range rcodes {
		switch rc {
		case dns.RcodeRefused:
			refused++
		case dns.RcodeSuccess:
			answered++
		default:
			t.Errorf("rcode %d", rc)
		}
	}
	if refused == 0 || answered < limit || refused+answered != 3*limit {
		t.Fatalf("answered %d, refused %d of %d (limit %d)", answered, refused, 3*limit, limit)
	}
	if n := e.audit.count(audit.ClassDNS, reason.ConnectionLimit); n != refused {
		t.Fatalf("%d connection_limit DNS audit events, %d refused", n, refused)
	}
}
