package connmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"runtime"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/stockade-dev/stockade/boundary/identity"
)

// The map's key: the network namespace's cookie, the client's and the
// server's addresses (16 bytes each; IPv4 as ::ffff:a.b.c.d), the client's
// and the server's ports (host order).
const (
	keySize = 48
	// valueSize: tgid u32, uid u32, CLOCK_BOOTTIME ns u64, socket inode
	// u64, then the connecting process's image: its executable's inode
	// u64 and device u32 (the kernel's dev_t), 4 bytes of padding, and
	// where its exec placed the code and the stack (u64 each).
	valueSize = 56
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

// sockOpsSkOff is the offset of the sk pointer in struct bpf_sock_ops (a
// __bpf_md_ptr, fixed by the uapi).
const sockOpsSkOff = 184

// v4MappedImm is the third 32-bit word of ::ffff:0:0/96 as loaded from
// memory on little endian (0xffff0000), as a 32-bit immediate.
const v4MappedImm int32 = -0x10000

// Stack layout of the program (offsets from the frame pointer).
const (
	keyOff        = -48 // netns cookie
	clientOff     = -40
	serverOff     = -24
	clientPort    = -8
	serverPort    = -4
	valueOff      = keyOff - valueSize // tgid
	valueUIDOff   = valueOff + 4
	valueTimeOff  = valueOff + 8
	valueInodeOff = valueOff + 16
	valueExeIno   = valueOff + 24
	valueExeDev   = valueOff + 32
	valueCode     = valueOff + 40
	valueStack    = valueOff + 48
)

// inodePath is where the socket's inode number lies, as the running
// kernel's BTF says: tcp_sock (a struct sock at offset 0) -> sk_socket ->
// file -> f_inode -> i_ino. The offsets differ between kernel builds, so
// they are read at Open, never compiled in.
type inodePath struct {
	skSocket, file, fInode, iIno uint32
	// image, when set, is where the connecting process's image lies:
	// task_struct -> mm -> start_code, start_stack and exe_file ->
	// f_inode -> i_ino, i_sb -> s_dev.
	image *imagePath
}

// imagePath holds the offsets of the connecting process's image, as the
// running kernel's BTF says.
type imagePath struct {
	taskMM, mmExeFile, mmStartCode, mmStartStack, iSb, sbDev uint32
}

// Option configures Open.
type Option func(*options)

type options struct {
	netns uint64
	port  uint16
	noBTF bool
}

// OnlyNetns makes the program record only the connects made in the network
// namespace whose cookie is cookie (a sandbox's), and return at once for
// every other connect of the machine.
func OnlyNetns(cookie uint64) Option { return func(o *options) { o.netns = cookie } }

// OnlyPort makes the program record only the connects to port (the
// proxy's): a lookup only ever asks for a connection accepted there, and
// the machine's other connects (the boundary's own upstream dials among
// them) then cost one comparison instead of a map update.
func OnlyPort(port uint16) Option { return func(o *options) { o.port = port } }

// PortOf returns the port of a TCP listener's address, for OnlyPort.
func PortOf(addr net.Addr) (uint16, error) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || ta.Port <= 0 || ta.Port > 65535 {
		return 0, fmt.Errorf("connmap: %s address %s has no TCP port to record connects to", addr.Network(), addr)
	}
	return uint16(ta.Port), nil
}

// withoutInode loads the program that does not read the socket's inode,
// as Open does on a kernel without BTF (tests).
func withoutInode() Option { return func(o *options) { o.noBTF = true } }

// Map is the attached program and its map. Close it to detach.
type Map struct {
	m      *ebpf.Map
	prog   *ebpf.Program
	l      link.Link
	cgroup string
	// inodeErr says why records carry no socket inode (nil: they do).
	inodeErr error
	// imageErr says why records carry no image of the connecting process
	// (nil: they do).
	imageErr error
}

var _ identity.ConnectRecords = (*Map)(nil)

// Open creates the map, loads the program and attaches it to the root of
// the cgroup v2 hierarchy. Records carry the socket's inode and the
// connecting process's image where the kernel has BTF and its verifier
// allows the reads (InodeErr and ImageErr say why not).
func Open(opts ...Option) (*Map, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := initialPidNamespace(); err != nil {
		return nil, err
	}
	cgroup, err := hierarchy()
	if err != nil {
		return nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "stockade_conns", Type: ebpf.LRUHash, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries})
	if err != nil {
		return nil, fmt.Errorf("connmap: create the map (needs CAP_BPF): %w", err)
	}
	var (
		path     *inodePath
		inodeErr = errors.New("connmap: socket inodes not wanted")
		imageErr = errors.New("connmap: images not wanted")
	)
	if !o.noBTF {
		path, inodeErr, imageErr = kernelInodePath()
	}
	load := func(path *inodePath) (*ebpf.Program, error) {
		return ebpf.NewProgram(&ebpf.ProgramSpec{Name: "stockade_conn", Type: ebpf.SockOps, Instructions: program(m.FD(), o, path), License: "Dual MIT/GPL"})
	}
	prog, err := load(path)
	if err != nil && path != nil && path.image != nil {
		// A kernel whose verifier refuses the walk from the current task
		// (bpf_get_current_task_btf in a sock_ops program) still records
		// the socket's inode.
		imageErr = fmt.Errorf("connmap: the verifier refused reading the connecting process's image: %w", err)
		path.image = nil
		prog, err = load(path)
	}
	if err != nil && path != nil {
		// A kernel whose verifier refuses the walk to the inode still
		// records the connector.
		inodeErr = fmt.Errorf("connmap: the verifier refused reading the socket's inode: %w", err)
		imageErr = inodeErr
		prog, err = load(nil)
	}
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
	return &Map{m: m, prog: prog, l: l, cgroup: cgroup, inodeErr: inodeErr, imageErr: imageErr}, nil
}

// kernelInodePath reads the offsets of inodePath from the running kernel's
// BTF (/sys/kernel/btf/vmlinux, decoded lazily: a few MB, once). Without
// the image's offsets (imageErr says why), the path has none.
func kernelInodePath() (p *inodePath, inodeErr, imageErr error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		err = fmt.Errorf("connmap: kernel BTF (socket inodes and images not recorded): %w", err)
		return nil, err, err
	}
	offsets := func(fields []btfField) error {
		for _, f := range fields {
			var st *btf.Struct
			if err := spec.TypeByName(f.typ, &st); err != nil {
				return fmt.Errorf("connmap: kernel BTF: struct %s: %w", f.typ, err)
			}
			off, ok := memberOffset(st, f.member)
			if !ok {
				return fmt.Errorf("connmap: kernel BTF: struct %s has no %s", f.typ, f.member)
			}
			if off > math.MaxInt16 {
				return fmt.Errorf("connmap: kernel BTF: %s.%s at offset %d, beyond a load's reach", f.typ, f.member, off)
			}
			*f.off = off
		}
		return nil
	}
	p = &inodePath{}
	if err := offsets([]btfField{{"sock", "sk_socket", &p.skSocket}, {"socket", "file", &p.file}, {"file", "f_inode", &p.fInode}, {"inode", "i_ino", &p.iIno}}); err != nil {
		return nil, err, err
	}
	im := &imagePath{}
	if imageErr = offsets([]btfField{{"task_struct", "mm", &im.taskMM}, {"mm_struct", "exe_file", &im.mmExeFile},
		{"mm_struct", "start_code", &im.mmStartCode}, {"mm_struct", "start_stack", &im.mmStartStack},
		{"inode", "i_sb", &im.iSb}, {"super_block", "s_dev", &im.sbDev}}); imageErr == nil {
		p.image = im
	}
	return p, nil, imageErr
}

// btfField names a struct member whose offset goes to off.
type btfField struct {
	typ, member string
	off         *uint32
}

// memberOffset returns the byte offset of the member named name in st,
// looking into anonymous structs and unions.
func memberOffset(st btf.Type, name string) (uint32, bool) {
	var members []btf.Member
	switch t := st.(type) {
	case *btf.Struct:
		members = t.Members
	case *btf.Union:
		members = t.Members
	default:
		return 0, false
	}
	for _, m := range members {
		if m.Name == name {
			return m.Offset.Bytes(), m.BitfieldSize == 0 && m.Offset%8 == 0
		}
		if m.Name == "" {
			if off, ok := memberOffset(btf.UnderlyingType(m.Type), name); ok {
				return m.Offset.Bytes() + off, true
			}
		}
	}
	return 0, false
}

// InodeErr says why records carry no socket inode (nil: they do).
func (m *Map) InodeErr() error { return m.inodeErr }

// ImageErr says why records carry no image of the connecting process
// (nil: they do): without it, an exec between the connect and the
// boundary's lookup is not seen.
func (m *Map) ImageErr() error { return m.imageErr }

// program is the sock_ops program: on TCP_CONNECT_CB (to o.port only and
// in o.netns only, where not 0), put the current process's tgid, uid, the
// boot time and (with path) the socket's inode number under the
// connection's key.
func program(mapFD int, o options, path *inodePath) asm.Instructions {
	const (
		exit  = "exit"
		v4    = "v4"
		v6    = "v6"
		ports = "ports"
		store = "store"
		image = "image"
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
	}
	if o.port != 0 {
		// remote_port holds the port in network byte order in its upper
		// 16 bits.
		insns = append(insns,
			asm.LoadMem(asm.R2, asm.R6, remotePortOff, asm.Word),
			asm.RSh.Imm(asm.R2, 16),
			asm.HostTo(asm.BE, asm.R2, asm.Half),
			asm.JNE.Imm(asm.R2, int32(o.port), exit))
	}
	insns = append(insns,
		asm.LoadMem(asm.R7, asm.R6, familyOff, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetNetnsCookie.Call(),
		asm.StoreMem(asm.RFP, keyOff, asm.R0, asm.DWord),
	)
	if o.netns != 0 {
		insns = append(insns,
			asm.LoadImm(asm.R2, int64(o.netns), asm.DWord),
			asm.JNE.Reg(asm.R0, asm.R2, exit))
	}
	insns = append(insns,
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
	)
	insns = append(insns, copy6...)
	insns = append(insns,
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
		asm.Mov.Imm(asm.R2, 0),
		asm.StoreMem(asm.RFP, valueInodeOff, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, valueExeIno, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, valueExeDev, asm.R2, asm.DWord), // and the padding
		asm.StoreMem(asm.RFP, valueCode, asm.R2, asm.DWord),
		asm.StoreMem(asm.RFP, valueStack, asm.R2, asm.DWord),
	)
	if path != nil {
		// After the inode, the image (when wanted), then the store.
		next := store
		if path.image != nil {
			next = image
		}
		// The socket's inode: ctx->sk as a tcp_sock (a BTF pointer), then
		// sk_socket, file, f_inode and i_ino. Loads through BTF pointers
		// are checked against the kernel's types by the verifier and read
		// 0 through a NULL pointer.
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R6, sockOpsSkOff, asm.DWord),
			asm.JEq.Imm(asm.R1, 0, next),
			asm.FnSkcToTcpSock.Call(),
			asm.JEq.Imm(asm.R0, 0, next),
			asm.LoadMem(asm.R1, asm.R0, int16(path.skSocket), asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, int16(path.file), asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, int16(path.fInode), asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, int16(path.iIno), asm.DWord),
			asm.StoreMem(asm.RFP, valueInodeOff, asm.R1, asm.DWord),
		)
	}
	if path != nil && path.image != nil {
		// The connecting process's image (the program runs in its
		// connect): the current task's mm, where its exec placed the code
		// and the stack, and its executable's inode and device.
		im := path.image
		insns = append(insns,
			asm.FnGetCurrentTaskBtf.Call().WithSymbol(image),
			asm.LoadMem(asm.R7, asm.R0, int16(im.taskMM), asm.DWord),
			asm.JEq.Imm(asm.R7, 0, store),
			asm.LoadMem(asm.R2, asm.R7, int16(im.mmStartCode), asm.DWord),
			asm.StoreMem(asm.RFP, valueCode, asm.R2, asm.DWord),
			asm.LoadMem(asm.R2, asm.R7, int16(im.mmStartStack), asm.DWord),
			asm.StoreMem(asm.RFP, valueStack, asm.R2, asm.DWord),
			asm.LoadMem(asm.R1, asm.R7, int16(im.mmExeFile), asm.DWord),
			asm.JEq.Imm(asm.R1, 0, store),
			asm.LoadMem(asm.R1, asm.R1, int16(path.fInode), asm.DWord),
			asm.JEq.Imm(asm.R1, 0, store),
			asm.LoadMem(asm.R2, asm.R1, int16(path.iIno), asm.DWord),
			asm.StoreMem(asm.RFP, valueExeIno, asm.R2, asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, int16(im.iSb), asm.DWord),
			asm.JEq.Imm(asm.R1, 0, store),
			asm.LoadMem(asm.R2, asm.R1, int16(im.sbDev), asm.Word),
			asm.StoreMem(asm.RFP, valueExeDev, asm.R2, asm.Word),
		)
	}
	return append(insns,
		asm.LoadMapPtr(asm.R1, mapFD).WithSymbol(store),
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
	if err := lookupAndDelete(m.m, &k, &v); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return identity.Connector{}, false, nil
		}
		return identity.Connector{}, false, fmt.Errorf("connmap: take %s -> %s: %w", client, server, err)
	}
	return decode(&v), true, nil
}

// decode reads a record's value.
func decode(v *[valueSize]byte) identity.Connector {
	ne := binary.NativeEndian
	c := identity.Connector{
		Pid:   int(ne.Uint32(v[0:])),
		UID:   ne.Uint32(v[4:]),
		At:    time.Duration(ne.Uint64(v[8:])),
		Inode: uint32(ne.Uint64(v[16:])),
	}
	if ino := ne.Uint64(v[24:]); ino != 0 {
		// The kernel's dev_t (MAJOR << 20 | MINOR) as stat(2) numbers it.
		kdev := ne.Uint32(v[32:])
		c.Exec = identity.Exec{Dev: unix.Mkdev(kdev>>20, kdev&(1<<20-1)), Ino: ino, Code: ne.Uint64(v[40:]), Stack: ne.Uint64(v[48:])}
	}
	return c
}

// mapElemAttr is the bpf(2) attribute of the map element commands (union
// bpf_attr's anonymous struct for BPF_MAP_*_ELEM: map_fd, padding, key,
// value, flags). The pointers stay unsafe.Pointer, so the runtime sees
// them (a stack that moves updates them); that makes the layout the
// kernel's only where pointers are 64 bits, which attrSize checks.
type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   unsafe.Pointer
	value unsafe.Pointer
	flags uint64
}

// attrSize fails the build where mapElemAttr is not the kernel's 32 bytes.
const attrSize = unsafe.Sizeof(mapElemAttr{})

var _ [attrSize - 32]byte
var _ [32 - attrSize]byte

// lookupAndDelete is one BPF_MAP_LOOKUP_AND_DELETE_ELEM on m, with the key
// and value where the caller has them: the library's call with byte
// slices boxes both into interfaces, two allocations per lookup (stop 45's
// allocation profile), for the same system call.
func lookupAndDelete(m *ebpf.Map, k *[keySize]byte, v *[valueSize]byte) error {
	attr := mapElemAttr{mapFD: uint32(m.FD()), key: unsafe.Pointer(k), value: unsafe.Pointer(v)}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_AND_DELETE_ELEM, uintptr(unsafe.Pointer(&attr)), attrSize)
	runtime.KeepAlive(&attr)
	runtime.KeepAlive(m) // its descriptor stays open through the call
	if errno != 0 {
		return errno
	}
	return nil
}

// Cgroup returns the cgroup v2 directory the program is attached to.
func (m *Map) Cgroup() string { return m.cgroup }

// Close detaches the program and frees the map.
func (m *Map) Close() error {
	return errors.Join(m.l.Close(), m.prog.Close(), m.m.Close())
}

// initPidNsInode is the inode number of the initial pid namespace
// (PROC_PID_INIT_INO): the kernel gives it that fixed number.
const initPidNsInode = 0xEFFFFFFC

// initialPidNamespace fails unless this process is in the initial pid
// namespace: the program records tgids as that namespace numbers them, so
// in any other (a container) they would name other processes in /proc.
func initialPidNamespace() error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return fmt.Errorf("connmap: pid namespace: %w", err)
	}
	if st.Ino != initPidNsInode {
		return fmt.Errorf("connmap: not in the initial pid namespace (ns inode %d): records would number processes as the host does, not as this /proc does", st.Ino)
	}
	return nil
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
