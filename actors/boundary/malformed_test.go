package boundary_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/stockade-dev/stockade/internal/testenv"
)

// TestMalformedFloodLeavesBoundaryServing sends 1,000 malformed proxy
// requests and 1,000 malformed DNS packets (truncated, oversized, garbage,
// slow) and checks that the boundary still answers, that no listener actor
// was restarted, and that every malformed proxy request that completed its
// header got a 400.
func TestMalformedFloodLeavesBoundaryServing(t *testing.T) {
	e := startEnv(t, envOpts{headerTimeout: 300 * time.Millisecond})
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}

	proxyCases := []struct {
		name    string
		payload func() []byte
		want400 bool
	}{
		{"garbage", func() []byte { return append(garbage(200), "\r\n\r\n"...) }, true},
		{"truncated", func() []byte { return []byte("CONNECT up.test:") }, false},
		{"oversized", func() []byte {
			return []byte("GET http://web.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n")
		}, true},
		{"slow", func() []byte { return []byte("CONN") }, false},
		{"bad port", func() []byte { return []byte("CONNECT up.test:99999 HTTP/1.1\r\n\r\n") }, true},
		{"origin form", func() []byte { return []byte("GET / HTTP/1.1\r\nHost: web.test\r\n\r\n") }, true},
		{"https uri", func() []byte { return []byte("GET https://web.test/ HTTP/1.1\r\n\r\n") }, true},
		{"h2 preface", func() []byte { return []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") }, true},
		{"no port", func() []byte { return []byte("CONNECT up.test HTTP/1.1\r\n\r\n") }, true},
		{"bad host", func() []byte { return []byte("CONNECT up/test:80 HTTP/1.1\r\n\r\n") }, true},
	}
	type job struct {
		i       int
		payload []byte
		want400 bool
		name    string
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("#%d dial: %v", j.i, err))
					mu.Unlock()
					continue
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write(j.payload)
				if j.name == "truncated" {
					_ = c.(*net.TCPConn).CloseWrite()
				}
				start := time.Now()
				resp, _ := io.ReadAll(c) // "slow" waits for the header timeout
				if j.name == "slow" && (time.Since(start) < 200*time.Millisecond || len(resp) != 0) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("#%d slow: closed after %s with %q, want a silent close at the header timeout", j.i, time.Since(start), resp))
					mu.Unlock()
				}
				_ = c.Close()
				if j.want400 && !bytes.HasPrefix(resp, []byte("HTTP/1.1 400 ")) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("#%d %s: got %q, want a 400", j.i, j.name, firstLine(resp)))
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < 1000; i++ {
		pc := proxyCases[i%len(proxyCases)]
		jobs <- job{i: i, payload: pc.payload(), want400: pc.want400, name: pc.name}
	}
	close(jobs)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d malformed proxy requests not answered as expected, first: %s", len(failures), failures[0])
	}

	// DNS: 1,000 malformed packets over UDP and TCP.
	uc, err := net.Dial("udp", e.dns)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	header := func() []byte { // a query header claiming one question, then junk
		return append([]byte{byte(rng.IntN(256)), byte(rng.IntN(256)), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}, garbage(rng.IntN(40))...)
	}
	for i := 0; i < 900; i++ {
		var p []byte
		switch i % 5 {
		case 0:
			p = garbage(1 + rng.IntN(11)) // truncated below a header
		case 1:
			p = garbage(64 + rng.IntN(400))
		case 2:
			p = garbage(4000) // oversized for classic UDP
		case 3:
			p = header()
		case 4:
			p = append([]byte{1, 2, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}, garbage(30)...) // a response: never answered
		}
		if _, err := uc.Write(p); err != nil {
			t.Fatalf("udp write: %v", err)
		}
	}
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", e.dns, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 4 {
		case 0:
			_, _ = c.Write([]byte{0x00}) // half a length prefix, then close
		case 1:
			_, _ = c.Write([]byte{0xff, 0xff, 1, 2, 3}) // claims 65535 bytes, sends 3
		case 2:
			_, _ = c.Write(append([]byte{0, 40}, garbage(40)...))
		case 3:
			_, _ = c.Write([]byte{0, 0})
		}
		_ = c.Close()
	}

	// Still serving: a valid CONNECT and valid UDP and TCP queries.
	code, body, c := e.connect(t, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT after the flood: %d %s", code, body)
	}
	_ = c.Close()
	for _, netw := range []string{"udp", "tcp"} {
		cl := &dns.Client{Net: netw, Timeout: 5 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion("up.test.", dns.TypeA)
		r, _, err := cl.Exchange(m, e.dns)
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s query after the flood: %v %v", netw, r, err)
		}
	}
	if r := restartsOf(e.b, "proxy") + restartsOf(e.b, "dns"); r != 0 {
		t.Fatalf("listener actors restarted %d times during the flood", r)
	}
	// 800 of the proxy requests are malformed with a full header (400), and
	// at least 75 of the TCP streams are counted; UDP datagrams beyond the
	// socket's receive buffer may be dropped by the kernel, so they are not
	// counted on here.
	testenv.Eventually(t, 5*time.Second, func() bool { return e.b.Stats().Malformed.Load() >= 875 },
		"malformed counted: %d, want >= 875", e.b.Stats().Malformed.Load())
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
