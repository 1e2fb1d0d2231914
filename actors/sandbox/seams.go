package sandbox

import (
	"context"
	"time"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/store"
)

// The sandbox actor's seams (its tests replace each one; see
// actors/sandbox/sandboxtest):
//
//   - Store: the records, with a revision per record (every write is
//     conditional on the revision the actor read). *store.Store (bbolt)
//     is the embedded default; a cluster's etcd store fits the same shape.
//   - driver.Driver: the node's supervisor processes and files
//     (driver/process by default).
//   - Clock: the time of the lifecycle machine and of its timers
//     (internal/clock; its Fake moves only when a test advances it).

// Store is where the sandbox actors keep their records.
type Store interface {
	// Get returns a record, or an error wrapping store.ErrNotFound.
	Get(ctx context.Context, name string) (store.Record, error)
	// List returns every record (and an error naming unreadable ones).
	List(ctx context.Context) ([]store.Record, error)
	// Put writes rec if the stored revision is rec.Revision (0: none
	// yet) and returns the new revision; store.ErrConflict otherwise.
	Put(ctx context.Context, rec store.Record) (uint64, error)
	// Delete removes a record if its revision is rev.
	Delete(ctx context.Context, name string, rev uint64) error
}

var _ Store = (*store.Store)(nil)

// Clock is the time seam (clock.Clock): the lifecycle machine reads Now,
// and the actor arms its timers with AfterFunc (f runs on another
// goroutine and only sends the actor a message). Tests use clock.Fake.
type Clock = clock.Clock

// SystemClock is the real clock.
type SystemClock = clock.System

// Deadlines of the actor's calls through its seams: nothing in Receive
// blocks longer.
const (
	// storeTimeout bounds one store read or write.
	storeTimeout = 5 * time.Second
	// startTimeout bounds starting (or adopting) a supervisor process.
	startTimeout = 10 * time.Second
	// stopGrace is how long a graceful stop waits before the kill.
	stopGrace = 10 * time.Second
	// killWait bounds waiting for a killed supervisor to be gone (off
	// the actor).
	killWait = 5 * time.Second
	// removeTimeout bounds removing a deleted sandbox's files (off the
	// actor).
	removeTimeout = 2 * time.Minute
)

// bounded is a context with a deadline for a call through a seam.
func bounded(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Cluster is the node's view of its cluster of gateway nodes; nil on a
// single node (the embedded default), where this node drives every
// sandbox in its store. The gateway adapts package cluster to it. Its
// methods are safe to call from any goroutine (a relay in flight checks
// Locate).
type Cluster interface {
	// Self is this node's name.
	Self() string
	// Owns reports whether this node owns sandbox name now (its lease
	// valid): asked before acting on a supervisor.
	Owns(name string) bool
	// Owned lists the sandboxes this node owns.
	Owned() []string
	// Place names the node a new sandbox goes to, and its API address.
	Place(name string) (node, api string)
	// Locate is what the cluster knows of a sandbox driven elsewhere.
	Locate(name string) Location
	// List is every sandbox in the cluster.
	List() []Location
	// Gateways are the live nodes' API addresses (supervisors and clients
	// may use any).
	Gateways() []string
}

// Location is a sandbox as the cluster's view has it.
type Location struct {
	Record store.Record
	Exists bool
	// OwnerNode and OwnerAPI name its owner ("" when it has none or the
	// owner is not live).
	OwnerNode, OwnerAPI string
	// HostAlive: a node of the record's host is live (when none is and
	// the sandbox has no owner, it is Error/NodeLost).
	HostAlive bool
}

// Ownership tells the sandboxes actor of a change in what this node owns
// (cluster mode): Own a sandbox (drive it), Disown it (stop its actor,
// leave its supervisor running), or Fenced (drop every sandbox: the node's
// lease was not renewed in time).
type Ownership struct {
	Kind    OwnershipKind
	Sandbox string
}

// OwnershipKind is the kind of an Ownership change.
type OwnershipKind int

// Ownership kinds.
const (
	Own    OwnershipKind = 1
	Disown OwnershipKind = 2
	Fenced OwnershipKind = 3
)
