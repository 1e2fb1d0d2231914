package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Target says where a load goes. With Proxy empty the load dials Addr
// directly; otherwise it dials Proxy and asks it to CONNECT to Addr
// (host:port, sent verbatim as the request authority).
type Target struct {
	Proxy string `json:"proxy,omitempty"`
	Addr  string `json:"addr"`
}

// Mode names the path a load takes: "direct" or "proxy".
func (t Target) Mode() string {
	if t.Proxy == "" {
		return "direct"
	}
	return "proxy"
}

// maxConnectResponse bounds the proxy's CONNECT response head.
const maxConnectResponse = 4096

// stepError tags a failure with the step it happened in, so results can
// count failures per kind.
type stepError struct {
	kind string
	err  error
}

func (e *stepError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func step(kind string, err error) error { return &stepError{kind: kind, err: err} }

// errorKind returns the step a failure happened in.
func errorKind(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.kind
	}
	return "other"
}

// tunnelConn is an open connection to the target, through the proxy's
// tunnel when there is one. rest holds bytes read past the CONNECT response.
type tunnelConn struct {
	net.Conn
	rest []byte
}

func (c *tunnelConn) Read(p []byte) (int, error) {
	if len(c.rest) > 0 {
		n := copy(p, c.rest)
		c.rest = c.rest[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// dial opens a connection to t, sending CONNECT through the proxy and
// requiring a 200 when there is one. head is scratch space of at least
// maxConnectResponse bytes. The deadline applies to the whole exchange.
func dial(ctx context.Context, d *net.Dialer, t Target, deadline time.Time, head []byte) (*tunnelConn, error) {
	addr := t.Addr
	if t.Proxy != "" {
		addr = t.Proxy
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, step("dial", err)
	}
	tc := &tunnelConn{Conn: c}
	if err := c.SetDeadline(deadline); err != nil {
		_ = c.Close()
		return nil, step("dial", err)
	}
	if t.Proxy == "" {
		return tc, nil
	}
	req := "CONNECT " + t.Addr + " HTTP/1.1\r\nHost: " + t.Addr + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		_ = c.Close()
		return nil, step("connect-write", err)
	}
	n := 0
	for {
		m, err := c.Read(head[n:maxConnectResponse])
		n += m
		if end := bytes.Index(head[:n], []byte("\r\n\r\n")); end >= 0 {
			if err := connectStatus(head[:end]); err != nil {
				_ = c.Close()
				return nil, err
			}
			tc.rest = append([]byte(nil), head[end+4:n]...)
			return tc, nil
		}
		if err != nil {
			_ = c.Close()
			return nil, step("connect-read", err)
		}
		if n == maxConnectResponse {
			_ = c.Close()
			return nil, step("connect-read", fmt.Errorf("response head longer than %d bytes", maxConnectResponse))
		}
	}
}

// connectStatus checks the status line of a CONNECT response head.
func connectStatus(head []byte) error {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	fields := bytes.Fields(line)
	if len(fields) < 2 || !bytes.HasPrefix(fields[0], []byte("HTTP/1.")) {
		return step("connect-status", fmt.Errorf("malformed status line %q", line))
	}
	if string(fields[1]) != "200" {
		return step("status-"+string(fields[1]), fmt.Errorf("proxy answered %q", line))
	}
	return nil
}
