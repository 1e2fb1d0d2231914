package store

import (
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/sandbox/idrange"
)

// SchemaVersion is the version of Record written by this build. A record
// with a newer version is refused on read, never half-understood.
const SchemaVersion = 1

// Intent is what the user last asked a sandbox to be. Values are explicit
// and stable; JSON uses the names.
type Intent int

// Intents.
const (
	IntentRunning Intent = 1
	IntentStopped Intent = 2
	IntentDeleted Intent = 3
)

func intentNames() []string { return []string{"", "running", "stopped", "deleted"} }

// String returns the intent's name.
func (i Intent) String() string {
	if n := intentNames(); i > 0 && int(i) < len(n) {
		return n[i]
	}
	return fmt.Sprintf("intent(%d)", int(i))
}

// MarshalText encodes the intent by name.
func (i Intent) MarshalText() ([]byte, error) {
	if i < IntentRunning || i > IntentDeleted {
		return nil, fmt.Errorf("store: intent %d has no name", int(i))
	}
	return []byte(i.String()), nil
}

// UnmarshalText decodes an intent name.
func (i *Intent) UnmarshalText(b []byte) error {
	for v, n := range intentNames() {
		if n != "" && n == string(b) {
			*i = Intent(v)
			return nil
		}
	}
	return fmt.Errorf("store: unknown intent %q", b)
}

// Spec is what `sandbox create` was given.
type Spec struct {
	Name string `json:"name"`
	// UID names this creation: a sandbox created again under the same
	// name gets a new one (its logs are its own). Records of earlier
	// versions have none.
	UID string `json:"uid,omitempty"`
	// Policy is the policy file's content, PolicyVersion its version.
	Policy        string `json:"policy"`
	PolicyVersion uint64 `json:"policyVersion"`
	// PolicyHistory keeps the versions before PolicyVersion (oldest
	// first, at most PolicyHistoryLen) for `policy get --rev`.
	PolicyHistory []PolicyRev             `json:"policyHistory,omitempty"`
	Workdir       string                  `json:"workdir,omitempty"`
	Argv          []string                `json:"argv,omitempty"`
	Restart       lifecycle.RestartPolicy `json:"restart"`
	Created       time.Time               `json:"created"`
	// Limits are the sandbox's resource limits as created (records of
	// earlier versions have none: the defaults apply).
	Limits Limits `json:"limits,omitzero"`
	// CreatedBy is who created it ("client:NAME"; an operator drives
	// what it created); PolicyBy who set the current policy version.
	// Empty in records of earlier versions.
	CreatedBy string `json:"createdBy,omitempty"`
	PolicyBy  string `json:"policyBy,omitempty"`
}

// Limits are a sandbox's resource limits: 0 is "the default", -1
// "unlimited".
type Limits struct {
	Pids        int64   `json:"pids,omitempty"`
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	IOBps       int64   `json:"ioBps,omitempty"`
	// LogBytes caps the workload's log on disk (workload.log and its
	// rotated files together); LogLinesPerSec and LogBurst bound the
	// lines it keeps (the rest are dropped and counted).
	LogBytes       int64 `json:"logBytes,omitempty"`
	LogLinesPerSec int64 `json:"logLinesPerSec,omitempty"`
	LogBurst       int64 `json:"logBurst,omitempty"`
}

// Or fills l's zero fields from def.
func (l Limits) Or(def Limits) Limits {
	l.Pids, l.MemoryBytes, l.CPUs, l.IOBps = or(l.Pids, def.Pids), or(l.MemoryBytes, def.MemoryBytes), or(l.CPUs, def.CPUs), or(l.IOBps, def.IOBps)
	l.LogBytes, l.LogLinesPerSec, l.LogBurst = or(l.LogBytes, def.LogBytes), or(l.LogLinesPerSec, def.LogLinesPerSec), or(l.LogBurst, def.LogBurst)
	return l
}

// or is v, or def when v is zero.
func or[T int64 | float64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// PolicyRev is an earlier version of a sandbox's policy.
type PolicyRev struct {
	Version uint64    `json:"version"`
	Policy  string    `json:"policy"`
	Until   time.Time `json:"until"`
	By      string    `json:"by,omitempty"` // who set it (Spec.PolicyBy then)
}

// PolicyHistoryLen is how many earlier policy versions a record keeps.
const PolicyHistoryLen = 10

// Record is everything the gateway keeps about one sandbox.
type Record struct {
	// Schema is set by Put to SchemaVersion.
	Schema int `json:"schema"`
	// Revision counts the record's writes: Put and Delete succeed only
	// when the stored revision is the one the writer read (records of
	// earlier versions have 0).
	Revision      uint64             `json:"revision,omitempty"`
	Spec          Spec               `json:"spec"`
	Intent        Intent             `json:"intent"`
	KeepWorkspace bool               `json:"keepWorkspace,omitempty"`
	Lifecycle     lifecycle.Snapshot `json:"lifecycle"`
	SupervisorPID int                `json:"supervisorPid,omitempty"`
	WorkloadPID   int                `json:"workloadPid,omitempty"`
	InstanceID    string             `json:"instanceId,omitempty"`
	// SupervisorAddr is the current supervisor's endpoint (host:port), as
	// its Hello said: a node that adopts the supervisor (a failover, a
	// gateway restart) tells it there to reconnect at once.
	SupervisorAddr string `json:"supervisorAddr,omitempty"`
	// Host names the host whose node created the sandbox: its workspace
	// and supervisor live there, and only a node of that host drives it
	// (cluster mode; empty on a single node).
	Host string `json:"host,omitempty"`
	// HostIDs is the sandbox's own host uid/gid range (package idrange)
	// when its gateway runs as root: given at create, or at the first
	// start of a record of an earlier version (which had none); nil
	// otherwise. Untrusted on read: only a range of the gateway's pool is
	// ever mapped.
	HostIDs *idrange.Range `json:"hostIds,omitempty"`
	// ShiftIDs are ranges the workspace's files may still be owned by
	// (the range of earlier versions, or an earlier range): the next start
	// moves them into HostIDs, and that instance's Hello clears them.
	ShiftIDs []idrange.Range `json:"shiftIds,omitempty"`
}

// Name returns the sandbox's name.
func (r Record) Name() string { return r.Spec.Name }
