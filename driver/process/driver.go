package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stockade-dev/stockade/chaos/fault"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/driver"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/store"
)

// Marker is in every supervisor's command line (Adopt checks it: a pid
// reused by another program is not adopted).
const Marker = "supervisor"

// Config is what the process driver hands every supervisor besides the
// sandbox's own spec.
type Config struct {
	// StateDir is the gateway's state dir (contract.StateDir layout).
	StateDir string
	// Binary is the stockade binary started as `stockade supervisor`.
	Binary string
	// Gateway is the API address supervisors dial back to (this node's).
	Gateway string
	// Gateways returns the API addresses of the cluster's gateway nodes,
	// written to each spec at start so that a supervisor can reach another
	// node when this one dies (Gateway is put first); nil: Gateway only.
	Gateways func() []string
	// Credentials issues a supervisor's certificate for sandbox name (at
	// every start), handed over in the 0600 spec.
	Credentials func(name string) (spec.Credentials, error)
	// Chaos: supervisors accept FaultRequests.
	Chaos bool
	// Boundary settings.
	Hosts         string
	DNSUpstream   string
	AllowLoopback bool
	MaxConns      int
	// Defaults fill a record's unset limits (records of earlier versions).
	Defaults store.Limits
	// Unconfined: no seccomp filter, no cgroup (benchmarks only).
	Unconfined bool
	// Faults is the fault seam (point fault.SupervisorStart); nil: none.
	Faults fault.Injector
	// IDClaims is the host's uid range claim directory (idrange), handed
	// to each supervisor; empty: idrange.DefaultClaimDir.
	IDClaims string
}

// Driver starts supervisors as local processes (driver.Driver).
type Driver struct {
	cfg Config
	// watched are the live supervisors this gateway watches, by pid. A
	// supervisor adopted again (its sandbox actor restarted, or in a
	// cluster its node owns the sandbox again) shares its watch: a new
	// one would add a pidfd and a goroutine that live as long as the
	// supervisor, at every adoption.
	mu      sync.Mutex
	watched map[int]*Handle
}

// New returns the process driver.
func New(cfg Config) *Driver { return &Driver{cfg: cfg, watched: map[int]*Handle{}} }

// keep records h among the watched supervisors and forgets those that
// exited (d.mu held).
func (d *Driver) keep(h *Handle) {
	for pid, w := range d.watched {
		select {
		case <-w.done:
			delete(d.watched, pid)
		default:
		}
	}
	d.watched[h.Pid] = h
}

var _ driver.Driver = (*Driver)(nil)

func (d *Driver) layout() contract.StateDir { return contract.StateDir(d.cfg.StateDir) }

// Workspace implements driver.Driver ("" for a name CheckName refuses:
// names reach the driver checked).
func (d *Driver) Workspace(name string) string {
	ws, err := d.layout().Workspace(name)
	if err != nil {
		return ""
	}
	return ws
}

// sandboxes opens the state dir's sandboxes directory as an os.Root: every
// file the driver makes, reads or removes for a sandbox is reached through
// it, so no name (checked first anyway) and no link can take the driver
// outside the state dir. The workload writes only beneath a workspace,
// which the driver never resolves a path through (Remove unlinks what is
// there, links included, without following them).
//
// The directory is 0700: a workspace holds files the sandbox's users made
// (a setuid one of the sandbox's root among them, inert inside, where the
// workspace is mounted nosuid), which no other host user may reach; the
// supervisor hands the workspace to the sandbox as a mount, so nothing
// inside needs to walk the path.
func (d *Driver) sandboxes() (*os.Root, error) {
	dir := d.layout().Sandboxes()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandboxes dir: %w", err)
	}
	if st, err := os.Stat(dir); err == nil && st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("sandboxes dir %s is mode %04o and cannot be made 0700: %w", dir, st.Mode().Perm(), err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("sandboxes dir: %w", err)
	}
	return root, nil
}

// Start implements driver.Driver: it writes the spec (0600) and starts
// `stockade supervisor --spec FILE` detached, its output appended to the
// creation's supervisor.log.
func (d *Driver) Start(ctx context.Context, l driver.Launch) (driver.Proc, error) {
	name := l.Spec.Name
	logsRel, err := contract.LogsRel(name, l.Spec.UID)
	if err != nil {
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	root, err := d.sandboxes()
	if err != nil {
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	defer root.Close()
	wsRel, specRel := filepath.Join(name, contract.WorkspaceDir), filepath.Join(name, contract.SpecFileName)
	under := d.layout().Sandboxes()
	ws, logs := filepath.Join(under, wsRel), filepath.Join(under, logsRel)
	if err := root.MkdirAll(wsRel, 0o755); err != nil {
		return nil, fmt.Errorf("workspace %s: %w", ws, err)
	}
	if err := root.MkdirAll(logsRel, 0o700); err != nil {
		return nil, fmt.Errorf("logs %s: %w", logs, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	creds, err := d.cfg.Credentials(name)
	if err != nil {
		return nil, fmt.Errorf("supervisor certificate: %w", err)
	}
	c := d.cfg
	s := spec.Supervisor{
		Name: name, Instance: l.Instance, Gateway: c.Gateway, Credentials: creds, Chaos: c.Chaos,
		Policy: l.Spec.Policy, PolicyVersion: l.Spec.PolicyVersion, Argv: l.Spec.Argv, Workdir: l.Spec.Workdir,
		Workspace: ws, LogDir: logs, AuditFile: filepath.Join(logs, contract.AuditLog),
		Hosts: c.Hosts, DNSUpstream: c.DNSUpstream, AllowLoopback: c.AllowLoopback, MaxConns: c.MaxConns,
		Limits: specLimits(l.Spec.Limits.Or(c.Defaults)), Unconfined: c.Unconfined,
		HostIDs: l.HostIDs, ShiftIDs: l.ShiftIDs, IDClaims: c.IDClaims,
	}
	if s.IDClaims == "" {
		s.IDClaims = idrange.DefaultClaimDir()
	}
	if c.Gateways != nil {
		s.Gateways = gatewayList(c.Gateway, c.Gateways())
	}
	if err := spec.WriteIn(root, specRel, s); err != nil {
		return nil, err
	}
	if c.Faults != nil {
		if err := c.Faults.Inject(fault.SupervisorStart); err != nil {
			return nil, fmt.Errorf("start supervisor: %w", err)
		}
	}
	logRel := filepath.Join(logsRel, contract.SupervisorLog)
	out, err := root.OpenFile(logRel, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("driver: open supervisor log: %w", err)
	}
	defer out.Close()
	// The supervisor rotates its log (--log-file) and keeps its stdout and
	// stderr on the current file; until it opens it, they are the file
	// opened here.
	logFile := filepath.Join(under, logRel)
	h, err := Start(Spec{Binary: c.Binary, Args: []string{Marker, "--spec", filepath.Join(under, specRel), "--log-file", logFile}, Out: out, Dir: filepath.Join(under, name)})
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.keep(h)
	d.mu.Unlock()
	return &proc{Handle: h, log: filepath.Join(under, logRel)}, nil
}

// Adopt implements driver.Driver.
func (d *Driver) Adopt(_ context.Context, name string, pid int) (driver.Proc, error) {
	if err := contract.CheckName(name); err != nil {
		return nil, fmt.Errorf("adopt supervisor %d: %w", pid, err)
	}
	spec, err := d.layout().SpecFile(name)
	if err != nil {
		return nil, fmt.Errorf("adopt supervisor %d: %w", pid, err)
	}
	h, err := d.adopt(pid, spec)
	if errors.Is(err, ErrGone) {
		return nil, fmt.Errorf("sandbox %s: supervisor %d: %w", name, pid, driver.ErrGone)
	}
	if err != nil {
		return nil, err
	}
	return &proc{Handle: h, log: d.newestLog(name), drift: d.drift(name)}, nil
}

// newestLog returns the supervisor log of the creation of name whose log
// directory changed last (the one a live supervisor serves), or "".
func (d *Driver) newestLog(name string) string {
	root, err := d.sandboxes()
	if err != nil {
		return ""
	}
	defer root.Close()
	logsRel := filepath.Join(name, contract.LogsDir)
	dirs, err := fs.ReadDir(root.FS(), logsRel)
	if err != nil {
		return ""
	}
	newest, when := "", time.Time{}
	for _, e := range dirs {
		info, err := e.Info()
		if err != nil || !e.IsDir() || contract.CheckUID(e.Name()) != nil {
			continue
		}
		if newest == "" || info.ModTime().After(when) {
			newest, when = e.Name(), info.ModTime()
		}
	}
	if newest == "" {
		return ""
	}
	return filepath.Join(d.layout().Sandboxes(), logsRel, newest, contract.SupervisorLog)
}

// adopt returns the watch of supervisor pid: the one this gateway has
// while that process lives (a pidfd names one process: never another that
// reused the pid), else a new one, for a process whose command line is
// `stockade supervisor --spec SPEC ...` with this sandbox's spec file.
func (d *Driver) adopt(pid int, spec string) (*Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.watched[pid]; ok {
		select {
		case <-h.done:
		default:
			return h, nil
		}
	}
	h, err := Adopt(pid, func(argv []string) bool {
		for i := 1; i+2 < len(argv); i++ {
			if argv[i] == Marker && argv[i+1] == "--spec" && sameFile(argv[i+2], spec) {
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	d.keep(h)
	return h, nil
}

// sameFile reports whether a and b name one existing file (the state dir
// may be named another way than when the supervisor was started).
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}

// Remove implements driver.Driver.
// The sandbox's cgroup goes first: its supervisor removes it on the way
// out, but one that was killed leaves it behind, and an empty group still
// holds kernel memory (found: 12,488 left by killed supervisors on a test
// machine, 1.1 GB of unreclaimable slab). Files are removed through the
// state dir's root (Driver.sandboxes): a name that is not a sandbox name
// is refused before anything is touched.
func (d *Driver) Remove(_ context.Context, name, uid string, keepWorkspace bool) error {
	dir, err := d.layout().Sandbox(name)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	gone := name
	switch {
	case keepWorkspace && uid == "":
		gone = "" // a record of an earlier version: its logs lie beside the workspace
	case keepWorkspace:
		if gone, err = contract.LogsRel(name, uid); err != nil {
			return fmt.Errorf("remove: %w", err)
		}
	}
	var errs []error
	if err := cgroup.RemoveNamed(cgroup.SandboxGroup(name, dir), groupWait); err != nil {
		errs = append(errs, fmt.Errorf("sandbox %s: %w", name, err))
	}
	if gone == "" {
		return errors.Join(errs...)
	}
	root, err := d.sandboxes()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("sandbox %s: %w", name, err))...)
	}
	defer root.Close()
	if err := root.RemoveAll(gone); err != nil {
		errs = append(errs, fmt.Errorf("sandbox %s: remove %s: %w", name, filepath.Join(d.layout().Sandboxes(), gone), err))
	}
	return errors.Join(errs...)
}

// groupWait bounds the wait for a deleted sandbox's processes to leave its
// cgroup (they die with its init, which dies with the supervisor).
const groupWait = 3 * time.Second

// proc is a supervisor process (driver.Proc); its Err ends with the last
// line of its log, which names why it ended.
type proc struct {
	*Handle
	log string
	// drift: the boundary settings this adopted supervisor runs with
	// differ from the gateway's (Drift); "" for a supervisor started here.
	drift string
}

func (p *proc) Pid() int { return p.Handle.Pid }

func (p *proc) Err() error {
	err := p.Handle.Err()
	if err == nil {
		return nil
	}
	last := lastLine(p.log)
	if cannotStart(err) {
		// The supervisor's last line is the whole message (path and fix).
		if last = strings.TrimPrefix(last, "stockade: "); last == "" {
			last = "the supervisor gave no reason (see its supervisor.log)"
		}
		return fmt.Errorf("%w: %s", driver.ErrCannotStart, last)
	}
	// Its own last word, when it had one ("stockade: <why>", printed as it
	// ends); any other last line is just its latest log entry (a killed
	// supervisor's is an audit event) and says nothing about the end.
	if why, ok := strings.CutPrefix(last, "stockade: "); ok && why != "" {
		return fmt.Errorf("%w: %s", err, why)
	}
	return err
}

// cannotStart reports whether the supervisor exited with
// contract.ExitSupervisorCannotStart: its sandbox cannot start, and a retry
// would fail the same way. An adopted supervisor's status is unknown.
func cannotStart(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == contract.ExitSupervisorCannotStart
}

// gatewayList is self followed by the other addresses of all, each once
// and none empty.
func gatewayList(self string, all []string) []string {
	out := []string{self}
	for _, a := range all {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// specLimits hands effective limits to the supervisor (-1: unlimited).
func specLimits(l store.Limits) spec.Limits {
	return spec.Limits{Pids: max(l.Pids, 0), MemoryBytes: max(l.MemoryBytes, 0), CPUs: max(l.CPUs, 0), IOBps: max(l.IOBps, 0),
		LogBytes: max(l.LogBytes, 0), LogLinesPerSec: max(l.LogLinesPerSec, 0), LogBurst: max(l.LogBurst, 0)}
}

// lastLine returns the last non-empty line of a log file (at most 400
// bytes of it).
func lastLine(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-4096, 0)
	buf := make([]byte, st.Size()-off)
	if n, _ := f.ReadAt(buf, off); n == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(buf)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(last) > 400 {
		last = last[:400]
	}
	return last
}
