package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Kind says how a request is proxied.
type Kind int

// Request kinds.
const (
	KindConnect Kind = 1 // CONNECT host:port, then an opaque tunnel
	KindForward Kind = 2 // absolute-URI HTTP/1.1 request, forwarded once
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindConnect:
		return "connect"
	case KindForward:
		return "forward"
	default:
		return "kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// MaxHeaderBytes bounds the request line plus headers.
const MaxHeaderBytes = 32 << 10

// Request is a parsed proxy request.
type Request struct {
	Kind Kind
	Host string // lower-case, no trailing dot, no brackets
	Port int
	// HTTP is the request as net/http parsed it: always for KindForward;
	// nil for a CONNECT of the common shape (readConnectFast).
	HTTP *http.Request
	// Reader holds the client's bytes read past the header (a CONNECT
	// client may send its TLS hello early); the tunnel drains it first.
	Reader *bufio.Reader
	from   *Readers   // lent the reader, when not nil (Release)
	rr     *reqReader // the lent reader
}

// BadRequestError is a malformed or unsupported request: answer 400. Err
// is the parser's error when there was one.
type BadRequestError struct {
	Msg string
	Err error
}

func (e *BadRequestError) Error() string { return "bad request: " + e.Msg }

// Unwrap returns the parser's error, if any.
func (e *BadRequestError) Unwrap() error { return e.Err }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Msg: fmt.Sprintf(format, args...)}
}

// limitedReader is an io.Reader whose limit can be lifted once the header is
// read (the body of a forwarded request is streamed without a limit).
type limitedReader struct {
	r       io.Reader
	n       int64
	limited bool
	err     error // the last error of the underlying reader
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if !l.limited {
		return l.r.Read(p)
	}
	if l.n <= 0 {
		return 0, badRequest("request header larger than %d bytes", MaxHeaderBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if err != nil {
		l.err = err
	}
	return n, err
}

// ReadRequest reads one proxy request from conn. The caller sets a read
// deadline on conn beforehand. Malformed input yields *BadRequestError.
func ReadRequest(conn net.Conn) (*Request, error) {
	return readWith((*Readers)(nil).get(conn))
}

func readWith(r *reqReader) (*Request, error) {
	if req := readConnectFast(r.br, &r.lr); req != nil {
		return req, nil
	}
	return readRequest(r.br, &r.lr)
}

// readConnectFast parses a CONNECT request whose whole header came in the
// first read and has the plainest shape (connectHeader): the common case,
// without net/http's allocations. It returns nil for anything else,
// leaving every byte to readRequest, which decides (its errors are the
// only ones). TestConnectFastAgrees checks that what it accepts,
// net/http accepts the same way.
func readConnectFast(br *bufio.Reader, lr *limitedReader) *Request {
	if _, err := br.Peek(1); err != nil {
		return nil // kept by br: readRequest reports it
	}
	b, _ := br.Peek(br.Buffered())
	n, target, ok := connectHeader(b)
	if !ok {
		return nil
	}
	host, port, err := splitHostPort(target, 0)
	if err != nil {
		return nil
	}
	_, _ = br.Discard(n)
	lr.limited = false
	return &Request{Kind: KindConnect, Host: host, Port: port, Reader: br}
}

// connectHeader returns the length of a complete CONNECT header at the
// start of b and its target, when it is of a shape net/http's ReadRequest
// certainly accepts with the same meaning: "CONNECT target HTTP/1.x" with
// a target of host characters, CRLF line ends, and header lines of token
// names and printable values, with at most one Host and no body headers
// (Content-Length, Transfer-Encoding). Anything else is not ok.
func connectHeader(b []byte) (n int, target string, ok bool) {
	const method = "CONNECT "
	if len(b) < len(method) || string(b[:len(method)]) != method {
		return 0, "", false
	}
	line, rest, ok := cutCRLF(b[len(method):])
	if !ok {
		return 0, "", false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return 0, "", false
	}
	t, proto := line[:sp], line[sp+1:]
	if p := string(proto); p != "HTTP/1.1" && p != "HTTP/1.0" {
		return 0, "", false
	}
	if !plainTarget(t) {
		return 0, "", false
	}
	hosts := 0
	for {
		var h []byte
		if h, rest, ok = cutCRLF(rest); !ok {
			return 0, "", false
		}
		if len(h) == 0 {
			return len(b) - len(rest), string(t), true
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return 0, "", false
		}
		name := h[:colon]
		for _, c := range name {
			if !isTokenByte(c) {
				return 0, "", false
			}
		}
		for _, c := range h[colon+1:] {
			if (c < ' ' || c > '~') && c != '\t' {
				return 0, "", false
			}
		}
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			if hosts++; hosts > 1 {
				return 0, "", false
			}
		case bytes.EqualFold(name, []byte("Content-Length")), bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, "", false
		}
	}
}

// cutCRLF splits b at its first CRLF; a lone CR or LF before it is not ok.
func cutCRLF(b []byte) (line, rest []byte, ok bool) {
	for i, c := range b {
		switch c {
		case '\n':
			return nil, nil, false
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return b[:i], b[i+2:], true
			}
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// plainTarget: host:port of letters, digits and . - _ :, or [v6]:port
// with an IPv6 address between the brackets (net/http checks it).
func plainTarget(t []byte) bool {
	if len(t) > 0 && t[0] == '[' {
		end := bytes.IndexByte(t, ']')
		if end < 0 {
			return false
		}
		a, err := netip.ParseAddr(string(t[1:end]))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		t = t[end+1:]
	}
	for _, c := range t {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == '_' || c == ':') {
			return false
		}
	}
	return true
}

// isTokenByte: RFC 9110's tchar.
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// readRequest parses any request with net/http.
func readRequest(br *bufio.Reader, lr *limitedReader) (*Request, error) {
	hr, err := http.ReadRequest(br)
	if err != nil {
		var ne net.Error
		if errors.As(lr.err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("read request: header not complete in time: %w", lr.err)
		}
		if errors.Is(lr.err, io.EOF) {
			return nil, fmt.Errorf("read request: client closed before a full header: %w", lr.err)
		}
		var bre *BadRequestError
		if errors.As(err, &bre) {
			return nil, bre
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read request: client closed before a full header: %w", err)
		}
		return nil, &BadRequestError{Msg: err.Error(), Err: err}
	}
	lr.limited = false
	req := &Request{HTTP: hr, Reader: br}
	if hr.Method == http.MethodConnect {
		req.Kind = KindConnect
		host, port, err := splitHostPort(hr.RequestURI, 0)
		if err != nil {
			return nil, err
		}
		req.Host, req.Port = host, port
		return req, nil
	}
	if hr.URL == nil || !hr.URL.IsAbs() {
		return nil, badRequest("%s %s: a proxy needs CONNECT host:port or an absolute http:// URI", hr.Method, hr.RequestURI)
	}
	if hr.URL.Scheme != "http" {
		return nil, badRequest("scheme %q: only http:// is forwarded; use CONNECT for https", hr.URL.Scheme)
	}
	if hr.ProtoMajor != 1 {
		return nil, badRequest("protocol %s is not HTTP/1.x", hr.Proto)
	}
	req.Kind = KindForward
	host, port, err := splitHostPort(hr.URL.Host, 80)
	if err != nil {
		return nil, err
	}
	req.Host, req.Port = host, port
	return req, nil
}

func splitHostPort(hostport string, defPort int) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == 0 {
			return "", 0, badRequest("target %q: want host:port", hostport)
		}
		host, portStr = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), strconv.Itoa(defPort)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, badRequest("target %q: port must be 1-65535", hostport)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, badRequest("target %q: empty host", hostport)
	}
	for _, c := range host {
		if c <= ' ' || c == '/' || c == '@' || c == '\\' || c > '~' {
			return "", 0, badRequest("target %q: invalid character in host", hostport)
		}
	}
	return host, port, nil
}

// hopByHop are headers a proxy must not forward.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Forward writes a forwarded request to upstream in origin form, closes the
// exchange after it (one request per connection, so every request passes a
// decision), then copies the response back to the client.
func (r *Request) Forward(client io.Writer, upstream net.Conn) error {
	hr := r.HTTP
	for _, h := range hopByHop {
		if h == "Transfer-Encoding" {
			continue // net/http manages framing from hr.TransferEncoding
		}
		hr.Header.Del(h)
	}
	hr.RequestURI = ""
	hr.Close = true
	if err := hr.Write(upstream); err != nil {
		return fmt.Errorf("forward request to %s: %w", upstream.RemoteAddr(), err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(upstream), hr)
	if err != nil {
		return fmt.Errorf("read response from %s: %w", upstream.RemoteAddr(), err)
	}
	defer resp.Body.Close()
	resp.Close = true
	if err := resp.Write(client); err != nil {
		return fmt.Errorf("write response to client: %w", err)
	}
	return nil
}
