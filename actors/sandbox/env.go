package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/actors/supervise"
	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/store"
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
	// IDs gives each sandbox its host uid/gid range (ids.go); nil when
	// the gateway is unprivileged (each sandbox maps only its uid).
	IDs *idrange.Allocator
}

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// CheckName validates a sandbox name (DNS-label rules: it names a
// directory, a host in ssh-config, and an actor).
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("sandbox name %q: use 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// layout is the state dir's layout (package contract).
func (e *Env) layout() contract.StateDir { return contract.StateDir(e.StateDir) }

// LogDir holds the logs of one creation (uid) of sandbox name.
func (e *Env) LogDir(name, uid string) string { return e.layout().Logs(name, uid) }

// openLifecycleAudit opens the lifecycle audit file (class 6002) of one
// creation of a sandbox; the supervisor writes decisions beside it.
func (e *Env) openLifecycleAudit(name, uid string) (*audit.File, error) {
	dir := e.LogDir(name, uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %s: create %s: %w", name, dir, err)
	}
	return audit.OpenFile(filepath.Join(dir, contract.LifecycleLog), audit.WithErrorLog(e.Log), audit.WithFlushInterval(0))
}

// DefaultLimits are what a sandbox gets when neither its create nor the
// gateway says otherwise: enough for an agent or a build, not enough to
// take the host down.
func DefaultLimits() store.Limits {
	return store.Limits{Pids: 512, MemoryBytes: 2 << 30, CPUs: 2}
}

// limits are the gateway's defaults for a sandbox's unset limits.
func (e *Env) limits() store.Limits { return e.Limits.Or(DefaultLimits()) }
