package identity

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// Identity is the process that holds the client end of a connection.
// The zero Identity means "unknown" (endpoint-only mode).
type Identity struct {
	// Pid is the owning process's pid as numbered in the resolver's proc root.
	Pid int
	// Exe is the readlink of /proc/<pid>/exe (may end in " (deleted)").
	Exe string
	// Ancestors holds the exe paths of the parent, grandparent, ... up to
	// pid 1 of the proc root's pid namespace, or up to (not including) the
	// WithStopAt pid (a sandbox's init), at most MaxAncestors entries.
	// The walk stops early at a process whose stat or exe cannot be read.
	Ancestors []string
	// UID is the socket's owner uid as reported by sock_diag (in the user
	// namespace of the sock_diag socket's creator), or, for a connection
	// identified from its connect record, the connecting process's uid as
	// the host numbers it.
	UID uint32
	// Socket is the client socket's inode (0: not looked up, as for a
	// connection identified from its connect record).
	Socket uint32
	// Holders are every candidate process holding the socket, this one
	// first, when more than one does (an inherited or passed socket); nil
	// otherwise. Filled when the candidates are a bounded set (WithPids: a
	// sandbox's processes), where the check is complete and cheap.
	Holders []Holder
	// Start is when the process started (CLOCK_BOOTTIME, to the tick),
	// and Exec what it ran when it was identified (the zero Exec: not
	// read): Recheck compares them with the process as it is later.
	Start time.Duration
	Exec  Exec
	// cands sums the bounded candidates listed for the lookup (0: not
	// bounded): Recheck scans again for holders when the set has changed.
	cands uint64
}

// Holder is one process holding a socket, with its Start and Exec as
// Identity has them.
type Holder struct {
	Pid       int
	Exe       string
	Ancestors []string
	Start     time.Duration
	Exec      Exec
}

// Ender is a Resolver that wants to hear when a connection it identified
// has ended: the client's next socket most likely takes that one's fd, so
// the next lookup reads it first (Netlink).
type Ender interface {
	Ended(id Identity)
}

// Marker is a Resolver that can do less for a connection when told when
// it was accepted: Mark, taken right after the accept, lets ResolveMarked
// rely on what a lookup begun since has learned (Netlink: the process
// events drained after the accept include every exec and exit the client
// made before it connected).
type Marker interface {
	Mark() Mark
	ResolveMarked(ctx context.Context, mark Mark, local, remote netip.AddrPort) (Identity, error)
}

// Mark is a Marker's note of a moment; the zero Mark relies on nothing.
type Mark struct{ drains uint64 }

// Resolver finds the Identity behind an accepted connection.
type Resolver interface {
	// Resolve identifies the process holding the client socket of the
	// connection whose proxy side is local and client side is remote. For a
	// redirected (transparent) connection local must be the original
	// destination the client connected to (SO_ORIGINAL_DST), not the
	// listener's address. Any error means the identity is unavailable.
	Resolve(ctx context.Context, local, remote netip.AddrPort) (Identity, error)
	// Mode names the resolver: ModeNetlink or ModeNone.
	Mode() string
}

// Resolver modes, as used by the --identity flag and audit events.
const (
	ModeNetlink = "netlink"
	ModeNone    = "none"
)

// MaxAncestors bounds the ancestor walk.
const MaxAncestors = 64

// Errors wrapped by Resolve failures that callers or tests may match.
var (
	// ErrSocketNotFound: sock_diag knows no TCP socket with that 4-tuple
	// (in the sock_diag socket's network namespace).
	ErrSocketNotFound = errors.New("no such socket")
	// ErrNoOwner: no candidate process holds the socket (closed, orphaned,
	// or owned by a process outside the candidates).
	ErrNoOwner = errors.New("no owning process")
)

// None is the endpoint-only resolver: it identifies nothing.
type None struct{}

// Resolve returns the zero Identity and no error.
func (None) Resolve(context.Context, netip.AddrPort, netip.AddrPort) (Identity, error) {
	return Identity{}, nil
}

// Mode returns ModeNone.
func (None) Mode() string { return ModeNone }
