package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/stockade-dev/stockade/policy/reason"
)

// DestRule is what the matched endpoint says about destination addresses.
type DestRule struct {
	AllowedIPs    []netip.Prefix // the endpoint's allowed_ips
	ExactHost     bool           // the endpoint names this host exactly
	AllowLoopback bool           // --allow-loopback-upstream
}

var (
	linkLocal4 = netip.MustParsePrefix("169.254.0.0/16")
	private4   = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"), // CGNAT, treated as private
	}
	metadata6 = netip.MustParsePrefix("fd00:ec2::254/128")
)

// CheckAddr applies DESIGN.md's internal-address rules to one resolved
// destination: link-local, metadata and unspecified addresses are always
// blocked; loopback only with AllowLoopback; private ranges only when listed
// in allowed_ips or when the endpoint is an exact host. When allowed_ips is
// set, every destination must fall inside it. It returns reason.None when
// the address may be dialed, else InternalAddressBlocked and why.
func CheckAddr(a netip.Addr, r DestRule) (reason.Code, string) {
	a = a.Unmap()
	inAllowed := false
	for _, p := range r.AllowedIPs {
		if p.Contains(a) {
			inAllowed = true
			break
		}
	}
	switch {
	case !a.IsValid() || a.IsUnspecified():
		return reason.InternalAddressBlocked, fmt.Sprintf("%s is unspecified", a)
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || linkLocal4.Contains(a) || metadata6.Contains(a):
		return reason.InternalAddressBlocked, fmt.Sprintf("%s is link-local or a metadata address", a)
	case a.IsMulticast() || a.IsInterfaceLocalMulticast():
		return reason.InternalAddressBlocked, fmt.Sprintf("%s is multicast", a)
	case a.IsLoopback():
		if !r.AllowLoopback {
			return reason.InternalAddressBlocked, fmt.Sprintf("%s is loopback (start the boundary with --allow-loopback-upstream to allow it)", a)
		}
		return reason.None, ""
	}
	if len(r.AllowedIPs) > 0 && !inAllowed {
		return reason.InternalAddressBlocked, fmt.Sprintf("%s is not in the endpoint's allowed_ips", a)
	}
	if isPrivate(a) && !inAllowed && !r.ExactHost {
		return reason.InternalAddressBlocked, fmt.Sprintf("%s is a private address; list it in the endpoint's allowed_ips", a)
	}
	return reason.None, ""
}

func isPrivate(a netip.Addr) bool {
	if a.IsPrivate() {
		return true
	}
	for _, p := range private4 {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolver looks up a host's addresses. *net.Resolver satisfies it; static
// hosts files do too.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Resolve returns the addresses of host (an IP literal resolves to itself).
func Resolve(ctx context.Context, res Resolver, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	return addrs, nil
}

// DialChecked resolves host, checks every address with CheckAddr and dials
// the first permitted one (never re-resolving: what was checked is what is
// dialed). blocked is non-empty when every address was refused by the rules.
func DialChecked(ctx context.Context, d *net.Dialer, res Resolver, host string, port int, rule DestRule) (conn net.Conn, blocked string, err error) {
	addrs, err := Resolve(ctx, res, host)
	if err != nil {
		return nil, "", err
	}
	var lastErr error
	tried := 0
	for _, a := range addrs {
		if code, why := CheckAddr(a, rule); code != reason.None {
			blocked = why
			continue
		}
		tried++
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, "", nil
		}
		lastErr = err
	}
	if tried == 0 {
		return nil, blocked, nil
	}
	return nil, "", fmt.Errorf("dial %s:%d: %w", host, port, lastErr)
}
