package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// headerFunc is connectHeader's shape, so a loosened copy can be checked
// by the same comparison.
type headerFunc func(b []byte) (int, string, bool)

// disagreement parses raw with hdr the way readConnectFast does and, when
// that accepts, with net/http the way readRequest does: it describes any
// difference (refused, other target, other bytes left for the tunnel).
func disagreement(hdr headerFunc, raw []byte) string {
	n, target, ok := hdr(raw)
	if !ok {
		return ""
	}
	host, port, err := splitHostPort(target, 0)
	if err != nil {
		return ""
	}
	fastRest := raw[n:]
	lr := &limitedReader{r: bytes.NewReader(raw), n: MaxHeaderBytes, limited: true}
	br := bufio.NewReaderSize(lr, 4096)
	req, err := readRequest(br, lr)
	if err != nil {
		return fmt.Sprintf("fast path takes %s:%d, net/http refuses: %v", host, port, err)
	}
	if req.Kind != KindConnect || req.Host != host || req.Port != port {
		return fmt.Sprintf("fast path %s:%d, net/http %v %s:%d", host, port, req.Kind, req.Host, req.Port)
	}
	slowRest, _ := io.ReadAll(br)
	if !bytes.Equal(fastRest, slowRest) {
		return fmt.Sprintf("bytes left for the tunnel: fast %q, net/http %q", fastRest, slowRest)
	}
	return ""
}

// connectSeeds are requests real clients send, and near misses.
var connectSeeds = []string{
	"CONNECT Example.COM.:443 HTTP/1.1\r\nHost: Example.COM.:443\r\n\r\n",
	"CONNECT [::1]:8443 HTTP/1.0\r\n\r\n\x16\x03\x01hello",
	"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\nUser-Agent: curl/8.5.0\r\nProxy-Connection: Keep-Alive\r\n\r\n",
	"CONNECT a_b.test:80 HTTP/1.1\r\nX-Empty:\r\nX-Tab:\tv\r\n\r\n",
	"CONNECT a.test:80 HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"CONNECT a.test:80 HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
	"CONNECT a.test:80 HTTP/1.1\r\n folded: x\r\n\r\n",
	"CONNECT a.test:080 HTTP/1.1\r\n\r\n",
	"CONNECT 10.0.0.1:65535 HTTP/1.1\r\n\r\n",
}

// mutate changes raw a few times: a byte replaced, inserted or dropped
// (from bytes that matter to the grammar), or a line repeated.
func mutate(rng *rand.Rand, raw string) []byte {
	const alphabet = " :\r\n\t[]%@/\x00\x7f\x80aZ09-._Hh"
	b := []byte(raw)
	for range 1 + rng.IntN(3) {
		if len(b) == 0 {
			break
		}
		i := rng.IntN(len(b))
		c := alphabet[rng.IntN(len(alphabet))]
		switch rng.IntN(4) {
		case 0:
			b[i] = c
		case 1:
			b = append(b[:i], append([]byte{c}, b[i:]...)...)
		case 2:
			b = append(b[:i], b[i+1:]...)
		case 3:
			if j := bytes.Index(b, []byte("\r\n")); j >= 0 {
				lines := strings.SplitAfter(string(b[j+2:]), "\r\n")
				k := rng.IntN(len(lines))
				b = []byte(string(b[:j+2]) + lines[k] + string(b[j+2:]))
			}
		}
	}
	return b
}

// TestConnectFastAgrees: on the seeds and 200,000 mutations of them,
// every request the fast path accepts, net/http accepts with the same
// target and the same bytes left for the tunnel; the fast path must take
// a real share of them (else this shows nothing).
func TestConnectFastAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	accepted := 0
	for i := range 200_000 {
		raw := []byte(connectSeeds[i%len(connectSeeds)])
		if i >= len(connectSeeds) {
			raw = mutate(rng, string(raw))
		}
		if d := disagreement(connectHeader, raw); d != "" {
			t.Fatalf("%q: %s", raw, d)
		}
		if _, _, ok := connectHeader(raw); ok {
			accepted++
		}
	}
	if accepted < 20_000 {
		t.Fatalf("the fast path took %d of 200,000 inputs: the comparison is too thin", accepted)
	}
	t.Logf("fast path took %d of 200,000 inputs, all as net/http does", accepted)
}

// TestConnectFastComparisonFails: the comparison finds a fast path that
// skips the header checks (so TestConnectFastAgrees can fail).
func TestConnectFastComparisonFails(t *testing.T) {
	loose := func(b []byte) (int, string, bool) {
		end := bytes.Index(b, []byte("\r\n\r\n"))
		line, _, ok := bytes.Cut(b, []byte("\r\n"))
		f := strings.Fields(string(line))
		if end < 0 || !ok || len(f) != 3 || f[0] != "CONNECT" {
			return 0, "", false
		}
		return end + 4, f[1], true
	}
	rng := rand.New(rand.NewPCG(15, 2))
	for i := range 20_000 {
		raw := []byte(connectSeeds[i%len(connectSeeds)])
		if i >= len(connectSeeds) {
			raw = mutate(rng, string(raw))
		}
		if d := disagreement(loose, raw); d != "" {
			t.Logf("found: %q: %s", raw, d)
			return
		}
	}
	t.Fatal("a fast path without header checks passed the comparison")
}

// TestReadRequestFastPath: a CONNECT of the common shape is parsed without
// net/http (HTTP nil) and keeps early tunnel bytes; one of another shape
// still parses (HTTP set).
func TestReadRequestFastPath(t *testing.T) {
	req, err := readFrom(t, "CONNECT Api.Test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n\x16\x03\x01")
	if err != nil || req.HTTP != nil || req.Host != "api.test" || req.Port != 443 {
		t.Fatalf("common CONNECT: %+v, %v; want api.test:443 without net/http", req, err)
	}
	if b, _ := req.Reader.Peek(3); string(b) != "\x16\x03\x01" {
		t.Fatalf("early tunnel bytes: %q", b)
	}
	req, err = readFrom(t, "CONNECT api.test:443 HTTP/1.1\nHost: api.test:443\n\n")
	if err != nil || req.HTTP == nil || req.Host != "api.test" {
		t.Fatalf("bare-LF CONNECT: %+v, %v; want net/http's parse", req, err)
	}
}
