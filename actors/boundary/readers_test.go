package boundary_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// TestEarlyBytesStayWithTheirTunnel: clients that send their first bytes in
// the same write as the CONNECT header (a TLS hello sent early) get exactly
// those bytes through their own tunnel, while the request readers holding
// them are lent from one conn actor to the next (proxy.Readers).
func TestEarlyBytesStayWithTheirTunnel(t *testing.T) {
	e := startEnv(t, envOpts{})
	const clients, rounds = 8, 25
	var g errgroup.Group
	for c := range clients {
		g.Go(func() error {
			for i := range rounds {
				if err := earlyTunnel(e, fmt.Sprintf("early-%d-%d-", c, i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// earlyTunnel opens a tunnel to the echo upstream with early bytes after
// the header and checks they come back alone.
func earlyTunnel(e *env, early string) error {
	c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
	if err != nil {
		return fmt.Errorf("dial proxy: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT up.test:%d HTTP/1.1\r\n\r\n%s", e.echoPort, early); err != nil {
		return fmt.Errorf("%s: write: %w", early, err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("%s: read CONNECT response: %w", early, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: CONNECT answered %d", early, resp.StatusCode)
	}
	got, err := io.ReadAll(br)
	if err != nil {
		return fmt.Errorf("%s: read echo: %w", early, err)
	}
	if string(got) != early {
		return fmt.Errorf("tunnel sent %q, echoed %q", early, got)
	}
	return nil
}
