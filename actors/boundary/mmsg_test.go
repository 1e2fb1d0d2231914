package boundary

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMmsgConnReadsAndWritesBatches: one recvmmsg reads the datagrams of
// three clients (a long one marked cut, with the bytes that fit), each with
// its client's address; one sendmmsg answers each client at the address
// read; a deadline and a closed socket end a read with the errors the read
// loop knows.
func TestMmsgConnReadsAndWritesBatches(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	bc := newBatchConn(pc)
	if bc == nil {
		t.Fatal("no batch conn for an IPv4 UDP socket")
	}
	sizes := []int{10, dnsMaxUDPQuery + 100, 20}
	var clients []*net.UDPConn
	for i, n := range sizes {
		c, err := net.DialUDP("udp4", nil, pc.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		if _, err := c.Write(bytes.Repeat([]byte{byte('a' + i)}, n)); err != nil {
			t.Fatal(err)
		}
	}
	var mm mmsgBufs
	bufs := make([][]byte, dnsBatchMax)
	for i := range bufs {
		bufs[i] = make([]byte, dnsMaxUDPQuery)
	}
	_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	type got struct {
		from netip.AddrPort
		data []byte
		cut  bool
		sa   unix.RawSockaddrInet4
	}
	var read []got
	for len(read) < len(sizes) {
		n, err := bc.recv(&mm, bufs)
		if err != nil {
			t.Fatalf("recv after %d datagrams: %v", len(read), err)
		}
		for i := range n {
			h := &mm.hdrs[i]
			read = append(read, got{sockaddrAddrPort(&mm.names[i]), bytes.Clone(bufs[i][:min(int(h.n), dnsMaxUDPQuery)]), h.hdr.Flags&unix.MSG_TRUNC != 0, mm.names[i]})
		}
	}
	for i, c := range clients {
		want := c.LocalAddr().(*net.UDPAddr).AddrPort()
		r := read[i]
		if r.from != want || r.data[0] != byte('a'+i) || len(r.data) != min(sizes[i], dnsMaxUDPQuery) || r.cut != (sizes[i] > dnsMaxUDPQuery) {
			t.Fatalf("datagram %d: from %s, %d bytes of %q, cut %v; want from %s, %d bytes, cut %v", i, r.from, len(r.data), r.data[:1], r.cut, want, min(sizes[i], dnsMaxUDPQuery), sizes[i] > dnsMaxUDPQuery)
		}
		if sockaddrOf(r.from) != r.sa {
			t.Fatalf("sockaddrOf(%s) = %+v, the kernel's %+v", r.from, sockaddrOf(r.from), r.sa)
		}
	}

	var out mmsgBufs
	for i := range read {
		out.setOut(i, []byte{'r', byte('a' + i)}, read[i].from)
	}
	if sent, err := bc.send(&out, len(read)); err != nil || sent != len(read) {
		t.Fatalf("send: %d of %d, %v", sent, len(read), err)
	}
	for i, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 16)
		n, err := c.Read(b)
		if err != nil || string(b[:n]) != string([]byte{'r', byte('a' + i)}) {
			t.Fatalf("client %d got %q, %v", i, b[:n], err)
		}
	}

	_ = pc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := bc.recv(&mm, bufs); !isTimeout(err) {
		t.Fatalf("recv past the deadline: %v, want a timeout", err)
	}
	_ = pc.SetReadDeadline(time.Time{})
	_ = pc.Close()
	if _, err := bc.recv(&mm, bufs); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("recv on a closed socket: %v, want net.ErrClosed", err)
	}
	if sa := sockaddrOf(netip.MustParseAddrPort("[::1]:53")); sa.Family != unix.AF_UNSPEC {
		t.Fatalf("sockaddrOf an IPv6 address: %+v, want AF_UNSPEC", sa)
	}
}
