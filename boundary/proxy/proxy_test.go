package proxy

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/policy/reason"
)

func TestCheckAddr(t *testing.T) {
	p := func(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }
	cases := []struct {
		addr string
		rule DestRule
		want reason.Code
	}{
		{"93.184.216.34", DestRule{}, reason.None},
		{"0.0.0.0", DestRule{AllowLoopback: true}, reason.InternalAddressBlocked},
		{"::", DestRule{}, reason.InternalAddressBlocked},
		{"169.254.169.254", DestRule{ExactHost: true, AllowedIPs: p("169.254.0.0/16")}, reason.InternalAddressBlocked},
		{"fe80::1", DestRule{ExactHost: true}, reason.InternalAddressBlocked},
		{"fd00:ec2::254", DestRule{ExactHost: true}, reason.InternalAddressBlocked},
		{"224.0.0.1", DestRule{}, reason.InternalAddressBlocked},
		{"127.0.0.1", DestRule{}, reason.InternalAddressBlocked},
		{"127.0.0.1", DestRule{AllowLoopback: true}, reason.None},
		{"::1", DestRule{AllowLoopback: true}, reason.None},
		{"::ffff:127.0.0.1", DestRule{}, reason.InternalAddressBlocked},
		{"10.1.2.3", DestRule{}, reason.InternalAddressBlocked},
		{"10.1.2.3", DestRule{ExactHost: true}, reason.None},
		{"10.1.2.3", DestRule{AllowedIPs: p("10.1.0.0/16")}, reason.None},
		{"192.168.1.1", DestRule{AllowedIPs: p("10.1.0.0/16")}, reason.InternalAddressBlocked},
		{"172.20.0.1", DestRule{}, reason.InternalAddressBlocked},
		{"100.64.0.1", DestRule{}, reason.InternalAddressBlocked},
		{"fc00::1", DestRule{}, reason.InternalAddressBlocked},
		{"93.184.216.34", DestRule{AllowedIPs: p("10.0.0.0/8")}, reason.InternalAddressBlocked},
		// IPv4 carried in IPv6 is checked as IPv4.
		{"64:ff9b::a9fe:a9fe", DestRule{ExactHost: true}, reason.InternalAddressBlocked},             // NAT64 169.254.169.254
		{"64:ff9b::5db8:d822", DestRule{}, reason.None},                                              // NAT64 93.184.216.34
		{"64:ff9b:1:a9fe:a9:fe00::", DestRule{ExactHost: true}, reason.InternalAddressBlocked},       // local-use NAT64 /48, 169.254.169.254
		{"64:ff9b:1::a9fe:a9fe", DestRule{ExactHost: true}, reason.InternalAddressBlocked},           // local-use NAT64 /96
		{"2002:a9fe:a9fe::1", DestRule{ExactHost: true}, reason.InternalAddressBlocked},              // 6to4
		{"2002:7f00:1::1", DestRule{}, reason.InternalAddressBlocked},                                // 6to4 127.0.0.1
		{"2002:5db8:d822::1", DestRule{}, reason.None},                                               // 6to4 93.184.216.34
		{"2001:0:a9fe:a9fe::1", DestRule{ExactHost: true}, reason.InternalAddressBlocked},            // Teredo server 169.254.169.254
		{"2001:0:5db8:d822:0:0:5601:5601", DestRule{ExactHost: true}, reason.InternalAddressBlocked}, // Teredo client ^0x5601... = 169.254.169.254
		{"::a9fe:a9fe", DestRule{ExactHost: true}, reason.InternalAddressBlocked},                    // IPv4-compatible
		{"::ffff:169.254.169.254", DestRule{ExactHost: true}, reason.InternalAddressBlocked},         // IPv4-mapped
		{"2001:db8::1", DestRule{}, reason.None},
	}
	for _, tc := range cases {
		got, why := CheckAddr(netip.MustParseAddr(tc.addr), tc.rule)
		if got != tc.want {
			t.Errorf("CheckAddr(%s, %+v) = %q (%s), want %q", tc.addr, tc.rule, got, why, tc.want)
		}
		if got != reason.None && why == "" {
			t.Errorf("CheckAddr(%s): a block without an explanation", tc.addr)
		}
	}
}

// pipeConn serves bytes to ReadRequest over a real socket pair.
func readFrom(t *testing.T, raw string) (*Request, error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = b.Write([]byte(raw)); _ = b.Close() }()
	return ReadRequest(a)
}

func TestReadRequest(t *testing.T) {
	cases := []struct {
		raw      string
		kind     Kind
		host     string
		port     int
		badInput bool
	}{
		{"CONNECT Example.COM.:443 HTTP/1.1\r\nHost: x\r\n\r\n", KindConnect, "example.com", 443, false},
		{"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", KindConnect, "::1", 8443, false},
		{"GET http://web.test/a?b=c HTTP/1.1\r\nHost: web.test\r\n\r\n", KindForward, "web.test", 80, false},
		{"POST http://web.test:8080/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n", KindForward, "web.test", 8080, false},
		{"CONNECT web.test HTTP/1.1\r\n\r\n", 0, "", 0, true},
		{"CONNECT web.test:0 HTTP/1.1\r\n\r\n", 0, "", 0, true},
		{"GET / HTTP/1.1\r\nHost: web.test\r\n\r\n", 0, "", 0, true},
		{"GET https://web.test/ HTTP/1.1\r\n\r\n", 0, "", 0, true},
		{"CONNECT a@b:80 HTTP/1.1\r\n\r\n", 0, "", 0, true},
		{"\x16\x03\x01garbage\r\n\r\n", 0, "", 0, true},
		{"GET http://web.test/ HTTP/1.1\r\nX: " + strings.Repeat("a", MaxHeaderBytes) + "\r\n\r\n", 0, "", 0, true},
	}
	for _, tc := range cases {
		req, err := readFrom(t, tc.raw)
		var bad *BadRequestError
		if tc.badInput {
			if !errors.As(err, &bad) {
				t.Errorf("%.40q: err %v, want a BadRequestError", tc.raw, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%.40q: %v", tc.raw, err)
			continue
		}
		if req.Kind != tc.kind || req.Host != tc.host || req.Port != tc.port {
			t.Errorf("%.40q: got %v %s:%d, want %v %s:%d", tc.raw, req.Kind, req.Host, req.Port, tc.kind, tc.host, tc.port)
		}
	}
	// A request the HTTP parser refuses keeps the parser's error in the chain.
	if _, err := readFrom(t, "\x16\x03\x01garbage\r\n\r\n"); errors.Unwrap(err) == nil || !strings.Contains(err.Error(), errors.Unwrap(err).Error()) {
		t.Errorf("garbage request: err %v, want a BadRequestError wrapping the parser's error", err)
	}
	if _, err := readFrom(t, "CONNECT a.test:"); err == nil || errors.As(err, new(*BadRequestError)) {
		t.Errorf("a header cut by EOF: err %v, want a plain read error (no 400 to a gone client)", err)
	}
}

func TestDenialBody(t *testing.T) {
	var b bytes.Buffer
	if err := WriteDenied(&b, Denial{Reason: reason.EndpointNotAllowed, Host: "h", Port: 1}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "HTTP/1.1 403 Forbidden\r\n") || !strings.Contains(s, `{"error":"policy_denied","reason":"endpoint_not_allowed","policy":"-","host":"h","port":1}`) {
		t.Fatalf("403:\n%s", s)
	}
}

func TestCheckPort(t *testing.T) {
	allowed := DestRule{AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		port int
		rule DestRule
		want reason.Code
	}{
		{6443, DestRule{ExactHost: true}, reason.InternalAddressBlocked},
		{2379, allowed, reason.InternalAddressBlocked},
		{2380, allowed, reason.InternalAddressBlocked},
		{10250, DestRule{ExactHost: true}, reason.InternalAddressBlocked},
		{10255, allowed, reason.InternalAddressBlocked},
		{443, DestRule{ExactHost: true}, reason.None},
		{6443, DestRule{}, reason.None}, // a wildcard endpoint, as OpenShell
	} {
		if got, why := CheckPort(tc.port, tc.rule); got != tc.want || (got != reason.None && why == "") {
			t.Errorf("CheckPort(%d, %+v) = %q %q, want %q", tc.port, tc.rule, got, why, tc.want)
		}
	}
}
