package transport

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/asynkron/protoactor-go/actor"
)

// NewActorSystem is actor.NewActorSystem for a process that talks over
// the transport: the ids it generates (futures, unnamed actors) start at a
// random point of the 64-bit sequence instead of at 1.
//
// A process that restarts on the same address (a gateway node, a client
// whose port is reused) would otherwise hand out the same ids as its last
// incarnation: a reply the other side queued for the old incarnation's
// future "$5" would complete the new incarnation's "$5", an unrelated
// request, with a wrong answer. With a random start a stale reply finds
// no such actor and goes to dead letters.
func NewActorSystem(opts ...actor.ConfigOption) *actor.ActorSystem {
	sys := actor.NewActorSystem(opts...)
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	// The top bits stay clear: the sequence never wraps in a lifetime.
	sys.ProcessRegistry.SequenceID = binary.LittleEndian.Uint64(b[:]) >> 2
	return sys
}
