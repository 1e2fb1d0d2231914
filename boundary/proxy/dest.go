package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/policy/reason"
)

// DestRule is what the matched endpoint says about destination addresses.
type DestRule struct {
	AllowedIPs    []netip.Prefix // the endpoint's allowed_ips
	ExactHost     bool           // the endpoint names this host exactly
	AllowLoopback bool           // --allow-loopback-upstream
	// LoopbackFix says how to allow a loopback upstream in the refusal
	// (default: start the boundary with --allow-loopback-upstream); a
	// sandbox's boundary names the gateway's flag.
	LoopbackFix string
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

// CheckPort refuses a control-plane port (contract.IsControlPlanePort) for
// an exact-host or allowed_ips endpoint, whatever the address (as
// OpenShell).
func CheckPort(port int, r DestRule) (reason.Code, string) {
	if (r.ExactHost || len(r.AllowedIPs) > 0) && contract.IsControlPlanePort(port) {
		return reason.InternalAddressBlocked, fmt.Sprintf("port %d is a control-plane port (etcd, Kubernetes API, kubelet)", port)
	}
	return reason.None, ""
}

// CheckAddr applies DESIGN.md's internal-address rules to one resolved
// destination: link-local, metadata and unspecified addresses are always
// blocked; loopback only with AllowLoopback; private ranges only when listed
// in allowed_ips or when the endpoint is an exact host. When allowed_ips is
// set, every destination must fall inside it. An IPv6 address that carries
// an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo) must pass the rules
// as that IPv4 address too. It returns reason.None when the address may be
// dialed, else InternalAddressBlocked and why.
func CheckAddr(a netip.Addr, r DestRule) (reason.Code, string) {
	a = a.Unmap()
	for _, v4 := range Embedded4(a) {
		if code, why := CheckAddr(v4, r); code != reason.None {
			return code, fmt.Sprintf("%s carries %s: %s", a, v4, why)
		}
	}
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
			fix := r.LoopbackFix
			if fix == "" {
				fix = "start the boundary with --allow-loopback-upstream to allow it"
			}
			return reason.InternalAddressBlocked, fmt.Sprintf("%s is loopback (%s)", a, fix)
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

// Embedded4 returns the IPv4 addresses an IPv6 address carries by a
// transition scheme: IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96, and
// the local-use 64:ff9b:1::/48 read at both its /48 and /96 positions),
// 6to4 (2002::/16) and Teredo (2001::/32: server and obfuscated client).
// IPv4-mapped addresses are unmapped by the caller.
func Embedded4(a netip.Addr) []netip.Addr {
	if !a.Is6() || a.Is4In6() {
		return nil
	}
	b := a.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	zero := func(from, to int) bool {
		for _, x := range b[from:to] {
			if x != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case zero(0, 12) && !zero(12, 14): // ::a.b.c.d, not :: or ::1
		return []netip.Addr{v4(12)}
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(4, 12): // 64:ff9b::/96
		return []netip.Addr{v4(12)}
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0x00 && b[5] == 0x01: // 64:ff9b:1::/48
		// RFC 6052 at /48: bits 48-63 and 72-87 (byte 8 is the u octet).
		return []netip.Addr{netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]}), v4(12)}
	case b[0] == 0x20 && b[1] == 0x02: // 2002:a.b.c.d::/48
		return []netip.Addr{v4(2)}
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00: // Teredo
		c := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{v4(4), netip.AddrFrom4(c)}
	}
	return nil
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
	if code, why := CheckPort(port, rule); code != reason.None {
		return nil, why, nil
	}
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
