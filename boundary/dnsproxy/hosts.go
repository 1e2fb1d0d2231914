package dnsproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/miekg/dns"
)

// HostsTTL is the TTL of records answered from a hosts file.
const HostsTTL = 60

// Hosts is an Upstream answering from a static hosts(5) file, for offline
// use (`--hosts FILE`): A and AAAA records from the file, ANY gets both,
// NXDOMAIN for names absent from it, NOERROR with no records for other
// types of a known name. It is immutable once loaded and safe for
// concurrent use.
type Hosts struct {
	source string
	name   string                  // String(), made once: it is asked per query
	names  map[string][]netip.Addr // normalised name -> addresses in file order
}

// LoadHosts reads a hosts(5) file: "ADDRESS NAME [ALIAS...]" per line, '#'
// starts a comment. IPv4-mapped IPv6 addresses count as IPv4 and zones are
// dropped. Every bad line is reported as "path:line: ...".
func LoadHosts(path string) (*Hosts, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	defer f.Close()
	return ParseHosts(f, path)
}

// ParseHosts parses hosts(5) text from r; source names it in errors.
func ParseHosts(r io.Reader, source string) (*Hosts, error) {
	h := &Hosts{source: source, name: "hosts:" + source, names: map[string][]netip.Addr{}}
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if err := h.add(fields); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", source, n, err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", source, err))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("hosts: %w", errors.Join(errs...))
	}
	return h, nil
}

func (h *Hosts) add(fields []string) error {
	addr, err := netip.ParseAddr(fields[0])
	if err != nil {
		return fmt.Errorf("%q is not an IP address", fields[0])
	}
	addr = addr.Unmap().WithZone("")
	if len(fields) == 1 {
		return fmt.Errorf("address %s has no host name", addr)
	}
	for _, name := range fields[1:] {
		norm, ok := Normalize(name)
		if !ok || !validHostname(norm) {
			return fmt.Errorf("%q is not a valid host name", name)
		}
		if !contains(h.names[norm], addr) {
			h.names[norm] = append(h.names[norm], addr)
		}
	}
	return nil
}

func contains(addrs []netip.Addr, a netip.Addr) bool {
	for _, b := range addrs {
		if a == b {
			return true
		}
	}
	return false
}

// validHostname accepts normalised names of labels of 1-63 letters,
// digits, '-' and '_', 253 bytes at most.
func validHostname(name string) bool {
	if len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// String names the file, e.g. "hosts:/etc/hosts".
func (h *Hosts) String() string { return h.name }

// Exchange implements Upstream. A request without exactly one question
// gets FORMERR.
func (h *Hosts) Exchange(_ context.Context, req *dns.Msg) (*dns.Msg, error) {
	resp := new(dns.Msg).SetReply(req)
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return resp, nil
	}
	q := req.Question[0]
	name, ok := Normalize(q.Name)
	addrs, found := h.names[name]
	if !ok || !found || q.Qclass != dns.ClassINET {
		resp.Rcode = dns.RcodeNameError
		return resp, nil
	}
	for _, a := range addrs {
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: HostsTTL}
		switch {
		case a.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
			hdr.Rrtype = dns.TypeA
			resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case a.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
			hdr.Rrtype = dns.TypeAAAA
			resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	return resp, nil
}

// Lookup implements LocalUpstream: the addresses of a normalised name, in
// file order, and whether the file lists it.
func (h *Hosts) Lookup(name string) ([]netip.Addr, bool) {
	addrs, ok := h.names[name]
	return addrs, ok
}
