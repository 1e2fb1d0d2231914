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
	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
)

// Env is what every sandbox actor shares; it is immutable after Start.
type Env struct {
	Store    *store.Store
	StateDir string
	// Gateway is the API address supervisors dial back to.
	Gateway string
	// Credentials issues a supervisor's certificate for sandbox name (at
	// every start) with the CA, handed over in the spec.
	Credentials func(name string) (spec.Credentials, error)
	// Chaos: FaultRequests are accepted (else refused before forwarding,
	// and the supervisor refuses them too).
	Chaos bool
	// Binary is the stockade binary the driver starts as supervisor.
	Binary string
	// Boundary settings handed to every supervisor.
	Hosts         string
	DNSUpstream   string
	AllowLoopback bool
	MaxConns      int // per sandbox (0: the boundary's default)
	// Unconfined: sandboxes without seccomp and cgroup (benchmarks only).
	Unconfined bool
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
	// Faults is the gateway's fault seam (nil: none).
	Faults fault.Injector
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

// Dir is the sandbox's directory under the state dir.
func (e *Env) Dir(name string) string { return filepath.Join(e.StateDir, "sandboxes", name) }

// Workspace is the sandbox's workspace (/sandbox inside).
func (e *Env) Workspace(name string) string { return filepath.Join(e.Dir(name), "workspace") }

// SpecFile is where the gateway hands the supervisor its spec.
func (e *Env) SpecFile(name string) string { return filepath.Join(e.Dir(name), "spec.json") }

// LifecycleAudit is the sandbox's lifecycle audit file (class 6002); the
// supervisor writes decisions to audit.jsonl beside it.
func (e *Env) LifecycleAudit(name string) string {
	return filepath.Join(e.Dir(name), "lifecycle.jsonl")
}

// openLifecycleAudit opens the lifecycle audit file of a sandbox.
func (e *Env) openLifecycleAudit(name string) (*audit.File, error) {
	if err := os.MkdirAll(e.Dir(name), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %s: create %s: %w", name, e.Dir(name), err)
	}
	return audit.OpenFile(e.LifecycleAudit(name), audit.WithErrorLog(e.Log), audit.WithFlushInterval(0))
}

// DefaultLimits are what a sandbox gets when neither its create nor the
// gateway says otherwise: enough for an agent or a build, not enough to
// take the host down.
func DefaultLimits() store.Limits {
	return store.Limits{Pids: 512, MemoryBytes: 2 << 30, CPUs: 2}
}

// limits are the gateway's defaults for a sandbox's unset limits.
func (e *Env) limits() store.Limits { return e.Limits.Or(DefaultLimits()) }

// specLimits hands effective limits to the supervisor (-1: unlimited).
func specLimits(l store.Limits) spec.Limits {
	s := spec.Limits{Pids: l.Pids, MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, IOBps: max(l.IOBps, 0)}
	if s.Pids < 0 {
		s.Pids = 0
	}
	if s.MemoryBytes < 0 {
		s.MemoryBytes = 0
	}
	if s.CPUs < 0 {
		s.CPUs = 0
	}
	return s
}
