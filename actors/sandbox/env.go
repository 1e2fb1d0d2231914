package sandbox

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/store"
	"github.com/stockade-dev/stockade/trust"
)

// Env is what every sandbox actor shares; it is immutable after Start.
type Env struct {
	// Store keeps the records (seams.go).
	Store Store
	// Driver starts, adopts and stops supervisors and removes a deleted
	// sandbox's files (driver/process by default).
	Driver driver.Driver
	// Clock is the time of the machines and their timers (default
	// SystemClock).
	Clock Clock
	// StateDir is where the logs of each creation lie (contract.StateDir).
	StateDir string
	// Limits are the default resource limits of a sandbox created without
	// its own (zero fields: DefaultLimits').
	Limits    store.Limits
	Lifecycle lifecycle.Config
	// RelayAddr is where clients and supervisors meet for SSH relays;
	// RelayListener is the actor pairing them.
	RelayAddr     string
	RelayListener *actor.PID
	Log           zerolog.Logger
	Counters      *supervise.Counters
	// Gateway is this node's API address (supervisors say Hello there).
	Gateway string
	// Cluster is the node's cluster (nil: a single node driving every
	// sandbox in its store).
	Cluster Cluster
	// Clients tells what each client may do (access.go; nil: no remote
	// client may do anything).
	Clients Clients
	// Self is this gateway node ("gateway:NODE"; zero: gateway:local):
	// the transitions it makes itself are recorded as its.
	Self trust.Identity
	// IDs gives each sandbox its host uid/gid range (ids.go); nil when
	// the gateway is unprivileged (each sandbox maps only its uid).
	IDs *idrange.Allocator
	// Refusals bounds the lines logging refused client requests
	// (NewRefusalLog; nil: Props makes one). The gateway shares one with
	// its API actor.
	Refusals *audit.DenialLimit
	// MaxSandboxesPerClient is how many sandboxes one client that is not
	// an admin may have created at once (0: DefaultMaxSandboxesPerClient;
	// -1: no quota).
	MaxSandboxesPerClient int
}

// CheckName validates a sandbox name (contract.CheckName: a DNS label, so
// that it is safe as a path element, an actor id and an etcd key).
func CheckName(name string) error { return contract.CheckName(name) }

// layout is the state dir's layout (package contract).
func (e *Env) layout() contract.StateDir { return contract.StateDir(e.StateDir) }

// LogDir holds the logs of one creation (uid) of sandbox name; an error
// for a name or uid contract.CheckName or CheckUID refuses.
func (e *Env) LogDir(name, uid string) (string, error) { return e.layout().Logs(name, uid) }

// openLifecycleAudit opens the lifecycle audit file (class 6002) of one
// creation of a sandbox; the supervisor writes decisions beside it.
func (e *Env) openLifecycleAudit(name, uid string) (*audit.File, error) {
	dir, err := e.LogDir(name, uid)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %s: create %s: %w", name, dir, err)
	}
	return audit.OpenFile(filepath.Join(dir, contract.LifecycleLog), audit.WithErrorLog(e.Log), audit.WithFlushInterval(0))
}

// DefaultLimits are what a sandbox gets when neither its create nor the
// gateway says otherwise: enough for an agent or a build, not enough to
// take the host down. The workload's log keeps 64 MiB on disk (the live
// file and three rotated ones) and 1,000 lines a second, 10,000 at once.
func DefaultLimits() store.Limits {
	return store.Limits{Pids: 512, MemoryBytes: 2 << 30, CPUs: 2, LogBytes: 64 << 20, LogLinesPerSec: 1000, LogBurst: 10000}
}

// MinLogBytes is the smallest log cap a sandbox may ask for
// (store.MinLogBytes).
const MinLogBytes = store.MinLogBytes

// checkLimits validates limits a client asks for (store.Limits.Validate,
// which every read of a record applies too).
func checkLimits(l store.Limits) error {
	if err := l.Validate(); err != nil {
		return errdefs.Invalid("%w", err)
	}
	return nil
}

// limitsProto is l on the wire.
func limitsProto(l store.Limits) *messages.Limits {
	return &messages.Limits{Pids: l.Pids, MemoryBytes: l.MemoryBytes, Cpus: l.CPUs, IoBps: l.IOBps,
		LogBytes: l.LogBytes, LogLinesPerSec: l.LogLinesPerSec, LogBurst: l.LogBurst}
}

// limitsOf is l from the wire (nil: all defaults).
func limitsOf(l *messages.Limits) store.Limits {
	return store.Limits{Pids: l.GetPids(), MemoryBytes: l.GetMemoryBytes(), CPUs: l.GetCpus(), IOBps: l.GetIoBps(),
		LogBytes: l.GetLogBytes(), LogLinesPerSec: l.GetLogLinesPerSec(), LogBurst: l.GetLogBurst()}
}

// limits are the gateway's defaults for a sandbox's unset limits.
func (e *Env) limits() store.Limits { return e.Limits.Or(DefaultLimits()) }
