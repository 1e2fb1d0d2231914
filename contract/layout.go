package contract

import "path/filepath"

// StateDir is a gateway's state directory (default /var/lib/stockade, or
// ~/.local/state/stockade when not root). Its layout:
//
//	state.db                    the store (bbolt), one record per sandbox
//	pki/                        the CA (ca.key 0600), 0700
//	client.config               the local operator's client credential
//	sandboxes/NAME/             one directory per sandbox name
//	  spec.json                 the current supervisor's spec (0600)
//	  workspace/                /sandbox inside (kept by delete --keep-workspace)
//	  logs/UID/                 the logs of one creation (UID: `get -o json` "uid")
//	    workload.log            the workload's output ("TIME STREAM LINE"; .1-.3 rotated)
//	    audit.jsonl             the boundary's decisions
//	    lifecycle.jsonl         the sandbox's transitions
//	    supervisor.log          the supervisor's own log
//
// The methods that take a sandbox's name or uid check them (CheckName,
// CheckUID) and fail on anything else: a name read from a store is
// untrusted, and one with a '/' or ".." would name a path outside the
// state dir. The paths they return are for the processes that own the
// state dir; the workload writes only beneath workspace/, and nothing of
// the gateway's resolves a path through it.
type StateDir string

// Files of a sandbox's log directory.
const (
	WorkloadLog   = "workload.log"
	AuditLog      = "audit.jsonl"
	LifecycleLog  = "lifecycle.jsonl"
	SupervisorLog = "supervisor.log"
)

// Directories of a sandbox's directory.
const (
	WorkspaceDir = "workspace"
	LogsDir      = "logs"
	SpecFileName = "spec.json"
)

// Store is the store's file.
func (d StateDir) Store() string { return filepath.Join(string(d), "state.db") }

// PKI is the CA's directory.
func (d StateDir) PKI() string { return filepath.Join(string(d), "pki") }

// ClientConfig is the local operator's client configuration.
func (d StateDir) ClientConfig() string { return filepath.Join(string(d), "client.config") }

// Sandboxes is the parent of every sandbox's directory.
func (d StateDir) Sandboxes() string { return filepath.Join(string(d), "sandboxes") }

// Sandbox is the directory of the sandbox name.
func (d StateDir) Sandbox(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(d.Sandboxes(), name), nil
}

// Workspace is the sandbox's workspace (/sandbox inside).
func (d StateDir) Workspace(name string) (string, error) {
	dir, err := d.Sandbox(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, WorkspaceDir), nil
}

// SpecFile is where the gateway hands the supervisor its spec.
func (d StateDir) SpecFile(name string) (string, error) {
	dir, err := d.Sandbox(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, SpecFileName), nil
}

// Logs is the log directory of one creation of sandbox name: a sandbox
// created again under the same name starts with none of the old lines.
// Records written before uids existed have uid "": their logs are in the
// sandbox's directory itself.
func (d StateDir) Logs(name, uid string) (string, error) {
	rel, err := LogsRel(name, uid)
	if err != nil {
		return "", err
	}
	return filepath.Join(d.Sandboxes(), rel), nil
}

// LogsRel is Logs relative to Sandboxes (for an os.Root opened there).
func LogsRel(name, uid string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	if uid == "" {
		return name, nil
	}
	if err := CheckUID(uid); err != nil {
		return "", err
	}
	return filepath.Join(name, LogsDir, uid), nil
}
