package proxy

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// readPooled serves raw to rs.ReadRequest over a pipe.
func readPooled(t *testing.T, rs *Readers, raw string) (*Request, error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	go func() { _, _ = b.Write([]byte(raw)); _ = b.Close() }()
	return rs.ReadRequest(a)
}

// TestReadersReuse reads requests one after another through one Readers,
// each released before the next: every request parses as with a fresh
// reader (the header limit starts again, no byte of an earlier client is
// seen), and readers are lent again.
func TestReadersReuse(t *testing.T) {
	var rs Readers
	seen := map[*reqReader]bool{}
	reused := 0
	big := "GET http://web.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHeaderBytes-100) + "\r\n\r\n"
	for i := range 60 {
		// An early TLS hello after the header, then a request just under
		// the header limit, then a malformed one.
		req, err := readPooled(t, &rs, "CONNECT early.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01hello")
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if req.Host != "early.test" || req.Reader.Buffered() != 8 {
			t.Fatalf("round %d: host %q, %d early bytes buffered, want early.test and 8", i, req.Host, req.Reader.Buffered())
		}
		if seen[req.rr] {
			reused++
		}
		seen[req.rr] = true
		req.Release()
		if req.Reader != nil || req.HTTP != nil || req.rr != nil {
			t.Fatalf("round %d: a released request still points at its reader", i)
		}

		req, err = readPooled(t, &rs, big)
		if err != nil {
			t.Fatalf("round %d: a header under the limit after a reused reader: %v", i, err)
		}
		if req.Host != "web.test" || req.Reader.Buffered() != 0 {
			t.Fatalf("round %d: host %q with %d bytes buffered (an earlier client's?)", i, req.Host, req.Reader.Buffered())
		}
		if b, _ := io.ReadAll(req.HTTP.Body); len(b) != 0 {
			t.Fatalf("round %d: body %q from an earlier client", i, b)
		}
		req.Release()

		if _, err := readPooled(t, &rs, "GET / HTTP/1.1\r\n\r\n"); !errors.As(err, new(*BadRequestError)) {
			t.Fatalf("round %d: origin-form request through a reused reader: err %v, want a BadRequestError", i, err)
		}
	}
	if reused == 0 {
		t.Fatal("no reader was lent twice in 60 rounds")
	}
}

// TestReleaseUnpooled: a request from ReadRequest (no Readers) or a nil
// request releases as a no-op.
func TestReleaseUnpooled(t *testing.T) {
	req, err := readFrom(t, "CONNECT a.test:443 HTTP/1.1\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	req.Release()
	if req.Reader == nil {
		t.Fatal("Release took the reader of a request no Readers lent")
	}
	var none *Request
	none.Release()
}
