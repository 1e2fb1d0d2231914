package proxy

import (
	"bufio"
	"net"
	"sync"
)

// readBufSize is a request reader's buffer: 1 KiB holds a common header
// whole; longer lines still parse (net/http reads a line in pieces), and a
// forwarded body bypasses the buffer.
const readBufSize = 1024

// reqReader is what reading one request takes: the limit on the header and
// the buffer over it. A Readers lends them out again after Release.
type reqReader struct {
	lr limitedReader
	br *bufio.Reader
}

// Readers lends request readers (the 1 KiB buffer and its limit: the
// largest allocation of a tunnel) to ReadRequest's callers; the zero value
// is ready to use. A nil *Readers lends nothing: every request gets fresh
// ones, as ReadRequest's do.
type Readers struct{ p sync.Pool }

func (rs *Readers) get(conn net.Conn) *reqReader {
	var r *reqReader
	if rs != nil {
		r, _ = rs.p.Get().(*reqReader)
	}
	if r == nil {
		r = &reqReader{}
		r.br = bufio.NewReaderSize(&r.lr, readBufSize)
	}
	r.lr = limitedReader{r: conn, n: MaxHeaderBytes, limited: true}
	return r
}

func (rs *Readers) put(r *reqReader) {
	if rs == nil || r == nil {
		return
	}
	r.lr = limitedReader{}
	r.br.Reset(&r.lr)
	rs.p.Put(r)
}

// ReadRequest reads one proxy request from conn as the package's
// ReadRequest does, with a reader lent by rs. The request's Release gives
// it back once nothing reads from the request any more; a request that
// failed to parse has given it back already.
func (rs *Readers) ReadRequest(conn net.Conn) (*Request, error) {
	r := rs.get(conn)
	req, err := readWith(r)
	if err != nil {
		rs.put(r)
		return nil, err
	}
	req.from, req.rr = rs, r
	return req, nil
}

// Release gives the request's reader back to the Readers that lent it (if
// any). Call it only when nothing reads from the request, its Reader or
// its HTTP body any more, and do not use the request after: its buffer
// will hold another client's bytes.
func (r *Request) Release() {
	if r == nil || r.rr == nil {
		return
	}
	r.from.put(r.rr)
	r.from, r.rr, r.Reader, r.HTTP = nil, nil, nil, nil
}
