// Package spec owns the hand-off from a gateway to the supervisor it
// starts: one JSON file (mode 0600) in the sandbox's directory with
// everything the supervisor needs to run that instance. A file, not
// arguments: the policy and the supervisor's private key stay out of
// /proc/PID/cmdline. The file lies in the gateway's state dir, which is
// never visible inside the sandbox.
package spec

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/sandbox/idrange"
)

// Supervisor is the spec of one supervisor instance.
type Supervisor struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	// Gateway is the API address of the gateway node that wrote this spec
	// (required; a spec without Gateways names only it).
	Gateway string `json:"gateway"`
	// Gateways are the API addresses of every gateway node to try, the
	// node that wrote the spec first (a cluster: the node that started the
	// supervisor may die and another become its owner). Empty: [Gateway].
	Gateways []string `json:"gateways,omitempty"`
	// Credentials are this instance's certificate (naming its sandbox),
	// issued at every start, and the gateway's CA.
	Credentials Credentials `json:"credentials"`
	// Chaos accepts FaultRequests from the gateway (tests, chaos harness).
	Chaos  bool   `json:"chaos,omitempty"`
	Policy string `json:"policy"`
	// PolicyVersion is the gateway's version of Policy (0: start at 1).
	PolicyVersion uint64   `json:"policyVersion,omitempty"`
	Argv          []string `json:"argv"`
	Workdir       string   `json:"workdir,omitempty"`
	// Workspace is the host directory mounted at /sandbox.
	Workspace string `json:"workspace"`
	// LogDir holds this creation's logs: the supervisor writes the
	// workload's output there (contract.WorkloadLog).
	LogDir string `json:"logDir,omitempty"`
	// AuditFile receives the boundary's decisions.
	AuditFile string `json:"auditFile"`
	// Boundary settings.
	Hosts         string `json:"hosts,omitempty"`
	DNSUpstream   string `json:"dnsUpstream,omitempty"`
	AllowLoopback bool   `json:"allowLoopback,omitempty"`
	// Limits for the sandbox's cgroup (-1 or 0: unlimited), and the tmpfs
	// sizes derived from the memory limit.
	Limits Limits `json:"limits"`
	// Unconfined runs the sandbox without its seccomp filter and cgroup:
	// only for the benchmark that measures their cost (gateway run
	// --bench-unconfined, hidden).
	Unconfined bool `json:"unconfined,omitempty"`
	// MaxConns caps the sandbox's concurrent mediated connections and DNS
	// queries in flight (0: the boundary's default, 1,024).
	MaxConns int `json:"maxConns,omitempty"`
	// HostIDs is the sandbox's own host uid/gid range; a supervisor
	// running as root refuses to start without one. ShiftIDs are ranges
	// the workspace's files are moved out of before the start. IDClaims
	// is the host's claim directory (idrange.Claims), where the supervisor
	// holds the range's claim while it runs.
	HostIDs  *idrange.Range  `json:"hostIds,omitempty"`
	ShiftIDs []idrange.Range `json:"shiftIds,omitempty"`
	IDClaims string          `json:"idClaims,omitempty"`
}

// GatewayList returns the gateway API addresses to say Hello to, in
// order: Gateways when given, else Gateway alone (a spec of an earlier,
// single-node gateway).
func (s Supervisor) GatewayList() []string {
	if len(s.Gateways) > 0 {
		return append([]string(nil), s.Gateways...)
	}
	return []string{s.Gateway}
}

// Limits are a sandbox's resource limits (<= 0: unlimited).
type Limits struct {
	Pids        int64   `json:"pids,omitempty"`
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	IOBps       int64   `json:"ioBps,omitempty"`
	// LogBytes caps workload.log and its rotated files together;
	// LogLinesPerSec and LogBurst bound the lines kept (a line bucket).
	LogBytes       int64 `json:"logBytes,omitempty"`
	LogLinesPerSec int64 `json:"logLinesPerSec,omitempty"`
	LogBurst       int64 `json:"logBurst,omitempty"`
}

// Credentials are PEM blocks: the CA certificate, the supervisor's
// certificate and its private key.
type Credentials struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// WriteIn writes s to name beneath root atomically with mode 0600: the
// gateway writes every spec through the state dir's root, so no name can
// lead it elsewhere.
func WriteIn(root *os.Root, name string, s Supervisor) error {
	b, err := Encode(s)
	if err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := root.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("spec: write %s: %w", tmp, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("spec: install %s: %w", name, err)
	}
	return nil
}

// Encode returns the spec file's content.
func Encode(s Supervisor) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("spec: encode: %w", err)
	}
	return b, nil
}

// Read reads a spec written by WriteIn.
func Read(path string) (Supervisor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Supervisor{}, fmt.Errorf("spec: read %s: %w", path, err)
	}
	return Decode(path, b)
}

// Decode decodes the content of the spec file path.
func Decode(path string, b []byte) (Supervisor, error) {
	var s Supervisor
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("spec: decode %s: %w", path, err)
	}
	if s.Name == "" || s.Instance == "" || s.Gateway == "" || len(s.Argv) == 0 {
		return s, fmt.Errorf("spec: %s lacks name, instance, gateway or argv", path)
	}
	if s.Credentials.CA == "" || s.Credentials.Cert == "" || s.Credentials.Key == "" {
		return s, fmt.Errorf("spec: %s lacks the supervisor's credentials (written by an older gateway?)", path)
	}
	if err := contract.CheckName(s.Name); err != nil {
		return s, fmt.Errorf("spec: %s: %w", path, err)
	}
	return s, nil
}
