package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// DefaultTryTimeout bounds one try (one server, one transport) of a
// Forwarder unless WithTryTimeout says otherwise.
const DefaultTryTimeout = 2 * time.Second

// Forwarder is an Upstream that forwards queries to DNS servers by IP
// address, in order: UDP first, the same server over TCP when the UDP
// answer is truncated, then the next server when a try fails (error,
// timeout, answer to another question) or answers SERVFAIL, REFUSED or
// NOTIMP. When every server answered with one of those rcodes, the last
// such answer is returned. It is safe for concurrent use.
type Forwarder struct {
	servers    []string // host:port
	tryTimeout time.Duration
}

// ForwarderOption configures a Forwarder.
type ForwarderOption func(*Forwarder)

// WithTryTimeout sets the timeout of one try (default DefaultTryTimeout).
// The context given to Exchange bounds the whole exchange as well.
func WithTryTimeout(d time.Duration) ForwarderOption {
	return func(f *Forwarder) {
		if d > 0 {
			f.tryTimeout = d
		}
	}
}

// NewForwarder returns a Forwarder to addrs, each an IP address with an
// optional port ("192.0.2.1", "192.0.2.1:5353", "[2001:db8::1]:53",
// "2001:db8::1"); the default port is 53. Host names are rejected: they
// would need DNS to be reached.
func NewForwarder(addrs []string, opts ...ForwarderOption) (*Forwarder, error) {
	if len(addrs) == 0 {
		return nil, errors.New("dns forwarder: no upstream servers")
	}
	f := &Forwarder{tryTimeout: DefaultTryTimeout}
	for _, a := range addrs {
		ap, err := parseServer(a)
		if err != nil {
			return nil, fmt.Errorf("dns forwarder: %w", err)
		}
		f.servers = append(f.servers, ap.String())
	}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

func parseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	addr, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("server %q is not an IP address with an optional port", s)
	}
	return netip.AddrPortFrom(addr, 53), nil
}

// SystemUpstream returns a Forwarder to the nameservers of a resolv.conf(5)
// file, using its port and its timeout as the per-try timeout.
func SystemUpstream(resolvConfPath string) (*Forwarder, error) {
	conf, err := dns.ClientConfigFromFile(resolvConfPath)
	if err != nil {
		return nil, fmt.Errorf("dns system upstream: %w", err)
	}
	if len(conf.Servers) == 0 {
		return nil, fmt.Errorf("dns system upstream: %s lists no nameserver", resolvConfPath)
	}
	addrs := make([]string, len(conf.Servers))
	for i, s := range conf.Servers {
		addrs[i] = net.JoinHostPort(s, conf.Port)
	}
	f, err := NewForwarder(addrs, WithTryTimeout(time.Duration(conf.Timeout)*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", resolvConfPath, err)
	}
	return f, nil
}

// String lists the servers, e.g. "dns://192.0.2.1:53,[2001:db8::1]:53".
func (f *Forwarder) String() string { return "dns://" + strings.Join(f.servers, ",") }

// Exchange implements Upstream. req is sent as is (its Id included).
func (f *Forwarder) Exchange(ctx context.Context, req *dns.Msg) (*dns.Msg, error) {
	var (
		errs []error
		last *dns.Msg
	)
	for _, addr := range f.servers {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		resp, err := f.try(ctx, req, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch resp.Rcode {
		case dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeNotImplemented:
			last = resp
			continue
		}
		return resp, nil
	}
	if last != nil {
		return last, nil
	}
	return nil, fmt.Errorf("dns upstream %s: %w", f, errors.Join(errs...))
}

// try asks one server over UDP, then over TCP if the answer was truncated.
func (f *Forwarder) try(ctx context.Context, req *dns.Msg, addr string) (*dns.Msg, error) {
	resp, err := f.exchange(ctx, "udp", req, addr)
	if err == nil && resp.Truncated {
		resp, err = f.exchange(ctx, "tcp", req, addr)
	}
	return resp, err
}

func (f *Forwarder) exchange(ctx context.Context, network string, req *dns.Msg, addr string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, f.tryTimeout)
	defer cancel()
	c := dns.Client{Net: network, Timeout: f.tryTimeout}
	conn, err := c.DialContext(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", network, addr, err)
	}
	defer conn.Close()
	// miekg/dns honours the context's deadline but not its cancellation:
	// closing the connection ends a read in progress at once.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	resp, _, err := c.ExchangeWithConnContext(ctx, req, conn)
	if err != nil {
		// Say timeout or cancellation the same way whichever fired first.
		switch ctxErr := ctx.Err(); {
		case ctxErr != nil:
			err = fmt.Errorf("%w (%w)", ctxErr, err)
		case errors.Is(err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("%s %s: %w", network, addr, err)
	}
	if !sameQuestion(req, resp) {
		return nil, fmt.Errorf("%s %s: answer is for another question", network, addr)
	}
	return resp, nil
}

func sameQuestion(req, resp *dns.Msg) bool {
	if len(req.Question) != len(resp.Question) {
		return false
	}
	for i, q := range req.Question {
		r := resp.Question[i]
		if q.Qtype != r.Qtype || q.Qclass != r.Qclass || !strings.EqualFold(q.Name, r.Name) {
			return false
		}
	}
	return true
}
