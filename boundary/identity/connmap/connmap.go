package connmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/boundary/identity"
)

// The map's key: the network namespace's cookie, the client's and the
// server's addresses (16 bytes each; IPv4 as ::ffff:a.b.c.d), the client's
// and the server's ports (host order).
const (
	keySize   = 48
	valueSize = 16 // tgid u32, uid u32, CLOCK_BOOTTIME ns u64
	// maxEntries bounds the map: connects nobody takes (to other servers)
	// are evicted least recently used first.
	maxEntries = 1 << 16
)

// Offsets in struct bpf_sock_ops (include/uapi/linux/bpf.h).
const (
	opOff         = 0
	familyOff     = 20
	remoteIP4Off  = 24
	localIP4Off   = 28
	remoteIP6Off  = 32
	localIP6Off   = 48
	remotePortOff = 64 // network order in the upper half on little endian
	localPortOff  = 68 // host order
	tcpConnectCB  = 3  // BPF_SOCK_OPS_TCP_CONNECT_CB
)

// v4MappedImm is the third 32-bit word of ::ffff:0:0/96 as loaded from
// memory on little endian (0xffff0000), as a 32-bit immediate.
const v4MappedImm int32 = -0x10000

// Stack layout of the program (offsets from the frame pointer).
const (
	keyOff       = -48 // netns cookie
	clientOff    = -40
	serverOff    = -24
	clientPort   = -8
	serverPort   = -4
	valueOff     = -64 // tgid
	valueUIDOff  = -60
	valueTimeOff = -56
)

// Map is the attached program and its map. Close it to detach.
type Map struct {
	m      *ebpf.Map
	prog   *ebpf.Program
	l      link.Link
	cgroup string
}

var _ identity.ConnectRecords = (*Map)(nil)

// Open creates the map, loads the program and attaches it to the root of
// the cgroup v2 hierarchy.
func Open() (*Map, error) {
	cgroup, err := hierarchy()
	if err != nil {
		return nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "stockade_conns", Type: ebpf.LRUHash, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries})
	if err != nil {
		return nil, fmt.Errorf("connmap: create the map (needs CAP_BPF): %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "stockade_conn", Type: ebpf.SockOps, Instructions: program(m.FD()), License: "Dual MIT/GPL"})
	if err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("connmap: load the program: %w", err)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: ebpf.AttachCGroupSockOps, Program: prog})
	if err != nil {
		_ = prog.Close()
		_ = m.Close()
		return nil, fmt.Errorf("connmap: attach to cgroup %s (needs CAP_NET_ADMIN): %w", cgroup, err)
	}
	return &Map{m: m, prog: prog, l: l, cgroup: cgroup}, nil
}

// program is the sock_ops program: on TCP_CONNECT_CB, put the current
// process's tgid, uid and the boot time under the connection's key.
func program(mapFD int) asm.Instructions {
	const (
		exit  = "exit"
		v4    = "v4"
		v6    = "v6"
		ports = "ports"
	)
	// v6: copy both IPv6 addresses, word by word, into the key.
	var copy6 asm.Instructions
	for w := int16(0); w < 16; w += 4 {
		copy6 = append(copy6,
			asm.LoadMem(asm.R2, asm.R6, localIP6Off+w, asm.Word),
			asm.StoreMem(asm.RFP, clientOff+w, asm.R2, asm.Word),
			asm.LoadMem(asm.R2, asm.R6, remoteIP6Off+w, asm.Word),
			asm.StoreMem(asm.RFP, serverOff+w, asm.R2, asm.Word))
	}
	copy6[0] = copy6[0].WithSymbol(v6)
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, opOff, asm.Word),
		asm.JNE.Imm(asm.R2, tcpConnectCB, exit),
		asm.LoadMem(asm.R7, asm.R6, familyOff, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetNetnsCookie.Call(),
		asm.StoreMem(asm.RFP, keyOff, asm.R0, asm.DWord),
		asm.JEq.Imm(asm.R7, unix.AF_INET, v4),
		asm.JNE.Imm(asm.R7, unix.AF_INET6, exit),
		// An AF_INET6 socket connecting to ::ffff:a.b.c.d goes through
		// IPv4: its IPv6 source is not set yet, its IPv4 fields are.
		asm.LoadMem(asm.R2, asm.R6, remoteIP6Off, asm.Word),
		asm.JNE.Imm(asm.R2, 0, v6),
		asm.LoadMem(asm.R2, asm.R6, remoteIP6Off+4, asm.Word),
		asm.JNE.Imm(asm.R2, 0, v6),
		asm.LoadMem(asm.R2, asm.R6, remoteIP6Off+8, asm.Word),
		asm.JEq.Imm32(asm.R2, v4MappedImm, v4),
	}
	insns = append(insns, copy6...)
	return append(insns,
		asm.Ja.Label(ports),

		asm.Mov.Imm(asm.R2, 0).WithSymbol(v4),
		asm.Mov.Imm32(asm.R3, v4MappedImm),
		asm.StoreMem(asm.RFP, clientOff, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, clientOff+8, asm.R3, asm.Word),
		asm.StoreMem(asm.RFP, serverOff, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, serverOff+8, asm.R3, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, localIP4Off, asm.Word),
		asm.StoreMem(asm.RFP, clientOff+12, asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, remoteIP4Off, asm.Word),
		asm.StoreMem(asm.RFP, serverOff+12, asm.R2, asm.Word),

		asm.LoadMem(asm.R2, asm.R6, localPortOff, asm.Word).WithSymbol(ports),
		asm.StoreMem(asm.RFP, clientPort, asm.R2, asm.Word),
		asm.LoadMem(asm.R2, asm.R6, remotePortOff, asm.Word),
		asm.RSh.Imm(asm.R2, 16),
		asm.HostTo(asm.BE, asm.R2, asm.Half),
		asm.StoreMem(asm.RFP, serverPort, asm.R2, asm.Word),

		asm.FnGetCurrentPidTgid.Call(),
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, valueOff, asm.R0, asm.Word),
		asm.FnGetCurrentUidGid.Call(),
		asm.StoreMem(asm.RFP, valueUIDOff, asm.R0, asm.Word),
		asm.FnKtimeGetBootNs.Call(),
		asm.StoreMem(asm.RFP, valueTimeOff, asm.R0, asm.DWord),

		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, valueOff),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY: a reused 4-tuple replaces the old record
		asm.FnMapUpdateElem.Call(),

		asm.Mov.Imm(asm.R0, 1).WithSymbol(exit),
		asm.Return(),
	)
}

// key builds the map's key for a connection from client to server in the
// network namespace whose cookie is netns.
func key(netns uint64, client, server netip.AddrPort) [keySize]byte {
	var k [keySize]byte
	binary.NativeEndian.PutUint64(k[0:], netns)
	c, s := client.Addr().As16(), server.Addr().As16() // IPv4 as ::ffff:a.b.c.d
	copy(k[8:], c[:])
	copy(k[24:], s[:])
	binary.NativeEndian.PutUint32(k[40:], uint32(client.Port()))
	binary.NativeEndian.PutUint32(k[44:], uint32(server.Port()))
	return k
}

// Take implements identity.ConnectRecords: it returns the recorded
// connector of the connection from client to server in the network
// namespace netns and removes the record. ok is false when there is none
// (made before the program was attached, from another machine, or
// evicted).
func (m *Map) Take(netns uint64, client, server netip.AddrPort) (identity.Connector, bool, error) {
	k := key(netns, client, server)
	var v [valueSize]byte
	if err := m.m.LookupAndDelete(k[:], v[:]); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return identity.Connector{}, false, nil
		}
		return identity.Connector{}, false, fmt.Errorf("connmap: take %s -> %s: %w", client, server, err)
	}
	return identity.Connector{
		Pid: int(binary.NativeEndian.Uint32(v[0:])),
		UID: binary.NativeEndian.Uint32(v[4:]),
		At:  time.Duration(binary.NativeEndian.Uint64(v[8:])),
	}, true, nil
}

// Cgroup returns the cgroup v2 directory the program is attached to.
func (m *Map) Cgroup() string { return m.cgroup }

// Close detaches the program and frees the map.
func (m *Map) Close() error {
	return errors.Join(m.l.Close(), m.prog.Close(), m.m.Close())
}

// hierarchy returns where the cgroup v2 hierarchy is mounted:
// /sys/fs/cgroup on a v2 machine, /sys/fs/cgroup/unified beside v1.
func hierarchy() (string, error) {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return "", errors.New("connmap: no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}
