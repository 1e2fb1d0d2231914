package nsrun

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/linelimit"
)

// Addresses of the boundary's sockets inside every sandbox.
const (
	ProxyPort = 3128
	DNSPort   = 53
	// ProxyURL is what the workload's HTTP(S)_PROXY variables say.
	ProxyURL = "http://127.0.0.1:3128"
)

// Defaults of Spec.
const (
	DefaultHostIDCount = 65536
	DefaultWorkdir     = "/sandbox"
	DefaultHostname    = "sandbox"
	DefaultResolvConf  = "/etc/resolv.conf"
	// WorkspaceMount is where the workspace appears inside.
	WorkspaceMount = "/sandbox"

	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Mode is how strictly the filesystem policy is enforced (OpenShell's
// landlock.compatibility).
type Mode int

// Modes. The zero Mode means BestEffort.
const (
	// BestEffort skips, with a warning naming path and cause, every path
	// that is missing and the whole policy when the kernel has no Landlock.
	BestEffort Mode = 1
	// HardRequirement fails the start naming the path and cause instead.
	HardRequirement Mode = 2
)

// String returns the policy spelling.
func (m Mode) String() string {
	switch m {
	case BestEffort:
		return "best_effort"
	case HardRequirement:
		return "hard_requirement"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Filesystem is the Landlock part of a sandbox (OpenShell's
// filesystem_policy). Paths are as seen inside the sandbox. /dev/null and
// /dev/zero are always read-write.
type Filesystem struct {
	// ReadOnly paths may be read, listed and executed beneath.
	ReadOnly []string
	// ReadWrite paths get every access right the kernel handles.
	ReadWrite []string
	// BaselineReadOnly and BaselineReadWrite are what every sandbox gets
	// besides the policy's lists (the caller's baseline, OpenShell's
	// "baseline enrichment"): they are bound into the root's view and
	// added to Landlock like ReadOnly and ReadWrite, but a missing one is
	// skipped without a warning in either Mode. A baseline path the policy
	// lists itself keeps the policy's access, and a baseline read-write
	// path is left out when the policy lists it, or a path beneath it,
	// read-only (the policy's narrower intent wins).
	BaselineReadOnly, BaselineReadWrite []string
	// IncludeWorkdir adds the workload's working directory to ReadWrite.
	IncludeWorkdir bool
	// Mode: BestEffort (also the zero value) or HardRequirement.
	Mode Mode
}

// Spec describes one sandbox.
type Spec struct {
	// Argv is the workload's command; Argv[0] without a slash is looked up
	// in the workload's PATH inside the sandbox.
	Argv []string
	// Env is the workload's environment. HTTP_PROXY, HTTPS_PROXY,
	// http_proxy, https_proxy, NO_PROXY and no_proxy are always replaced;
	// PATH and HOME get defaults when absent.
	Env []string
	// ProxyLoopback lists loopback hosts ("localhost", "127.0.0.1") that
	// must go through the proxy: they are left out of NO_PROXY, which
	// otherwise names both (DefaultNoProxy). The caller lists those its
	// policy allows as endpoints, so a request to them is mediated and
	// audited (and reaches the host's loopback through the boundary, not
	// the sandbox's own).
	ProxyLoopback []string
	// Workspace is the host directory mounted on /sandbox. As root, Start
	// makes it owned by the sandbox user's host uid/gid (not recursively).
	Workspace string
	// Workdir is the workload's working directory inside (default /sandbox).
	Workdir string
	// RunAsUser and RunAsGroup are the workload's ids inside the sandbox
	// (default 0, see the package comment). As root they must be below
	// HostIDCount.
	RunAsUser, RunAsGroup uint32
	// HostIDBase and HostIDCount give the host id range the sandbox's ids
	// map to when Start runs as root: the sandbox's own (package idrange),
	// above the host's 16-bit ids; HostIDBase is required, HostIDCount
	// defaults to 65536. The user namespace is created with HostIDBase as
	// its owner (userns.go). Ignored when unprivileged.
	HostIDBase, HostIDCount uint32
	// Filesystem is the Landlock policy.
	Filesystem Filesystem
	// Hidden directories (paths as inside, which for host directories are
	// the host paths) are covered by an empty read-only tmpfs, whatever the
	// filesystem policy lists: the gateway's state directory, for example.
	// Missing ones are ignored; a non-directory fails the start.
	Hidden []string
	// Hostname inside (default "sandbox").
	Hostname string
	// ResolvConf is the path inside that the generated resolv.conf
	// (nameserver 127.0.0.1) covers (default /etc/resolv.conf); a symlink
	// is covered itself, not its target.
	ResolvConf string
	// Executable is the binary to re-exec (default /proc/self/exe); its
	// main must call MaybeRunStage first.
	Executable string
	// Stdin, Stdout and Stderr are the workload's (nil: /dev/null). They
	// follow os/exec.Cmd's rules: a non-*os.File gets a pipe and a copying
	// goroutine that ends when every sandbox process has closed it.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Logger gets the parent side's debug lines (zero value: none).
	Logger zerolog.Logger
	// TmpfsBytes sizes each private tmpfs (/tmp, /var/tmp, /dev/shm; 0:
	// the kernel's default, half the host's memory). Their pages are
	// charged to the memory cgroup of whoever writes them.
	TmpfsBytes int64
	// NoSeccomp runs the workload without its seccomp filter: for the
	// benchmark that measures the filter's cost only, never in service.
	NoSeccomp bool
	// AllowPtrace lets the seccomp filter allow ptrace, process_vm_readv
	// and process_vm_writev (the policy's stockade.allow_ptrace).
	AllowPtrace bool
	// Cgroup, when set, is called with init's host pid right after init
	// starts and before it starts anything: it moves init (and so every
	// process of the sandbox) into the sandbox's cgroup. An error fails
	// the start.
	Cgroup func(initPid int) error
	// Output, when set, has init take the workload's stdout and stderr,
	// drain them, cut them into lines and let them through within its
	// limits, inside the sandbox's cgroup (a flood is the sandbox's CPU,
	// not the caller's); Output.Sink gets what passed and the counts of
	// what did not. Stdout and Stderr then get only what init itself
	// writes (the Go runtime's report, should init crash). Exec'd
	// processes keep their own descriptors.
	Output *Output
}

// stageConfig is what the parent sends to init and init to the exec stage.
type stageConfig struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
	Workdir   string   `json:"workdir"`
	Workspace string   `json:"workspace"`
	UID       uint32   `json:"uid"`
	GID       uint32   `json:"gid"`
	SetGroups bool     `json:"set_groups"`
	ReadOnly  []string `json:"read_only"`
	ReadWrite []string `json:"read_write"`
	// The baseline after merging with the policy's lists (prepare).
	BaselineReadOnly  []string `json:"baseline_read_only,omitempty"`
	BaselineReadWrite []string `json:"baseline_read_write,omitempty"`
	Mode              Mode     `json:"mode"`
	Hidden            []string `json:"hidden"`
	Hostname          string   `json:"hostname"`
	ResolvConf        string   `json:"resolv_conf"`
	TmpfsBytes        int64    `json:"tmpfs_bytes,omitempty"`
	NoSeccomp         bool     `json:"no_seccomp,omitempty"`
	// Inotify are the per-uid inotify limits init sets in the sandbox's
	// user namespace (userns.go).
	Inotify     inotifyLimits `json:"inotify,omitzero"`
	AllowPtrace bool          `json:"allow_ptrace,omitempty"`
	// ParentProxy: the parent made the proxy listener in init's network
	// namespace (proxyListenerIn); init makes and passes the other three.
	ParentProxy bool `json:"parent_proxy,omitempty"`
	// Output: init pumps the workload's stdout and stderr to fdOutput
	// within these limits (Spec.Output, pump.go).
	Output *linelimit.Limits `json:"output,omitempty"`
}

// idMapping is the user namespace layout for one Start.
type idMapping struct {
	root            bool   // the caller is root: map a host range
	hostUID         uint32 // host uid/gid the sandbox's RunAsUser/Group map to
	hostGID         uint32
	base, count     uint32 // root only
	callerUID       int    // unprivileged only
	callerGID       int
	insideUID       uint32
	insideGID       uint32
	needAmbientCaps bool // unprivileged with a non-zero RunAsUser
}

// prepare validates s, fills defaults and returns the stage config and the
// id mapping.
func (s *Spec) prepare() (*stageConfig, idMapping, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, idMapping{}, errors.New("spec: empty Argv")
	}
	if !filepath.IsAbs(s.Workspace) {
		return nil, idMapping{}, fmt.Errorf("spec: workspace %q is not an absolute path", s.Workspace)
	}
	if fi, err := os.Stat(s.Workspace); err != nil {
		return nil, idMapping{}, fmt.Errorf("spec: workspace: %w", err)
	} else if !fi.IsDir() {
		return nil, idMapping{}, fmt.Errorf("spec: workspace %s is not a directory", s.Workspace)
	}
	cfg := &stageConfig{
		Argv:       s.Argv,
		Workdir:    orDefault(s.Workdir, DefaultWorkdir),
		Workspace:  s.Workspace,
		UID:        s.RunAsUser,
		GID:        s.RunAsGroup,
		ReadOnly:   s.Filesystem.ReadOnly,
		ReadWrite:  s.Filesystem.ReadWrite,
		Mode:       s.Filesystem.Mode,
		Hidden:     s.Hidden,
		Hostname:   orDefault(s.Hostname, DefaultHostname),
		TmpfsBytes: s.TmpfsBytes,
		NoSeccomp:  s.NoSeccomp,
		ResolvConf: orDefault(s.ResolvConf, DefaultResolvConf),
	}
	cfg.AllowPtrace = s.AllowPtrace
	if cfg.Mode == 0 {
		cfg.Mode = BestEffort
	}
	if o := s.Output; o != nil {
		if o.Sink == nil {
			return nil, idMapping{}, errors.New("spec: Output without a Sink")
		}
		if err := o.Limits.Validate(); err != nil {
			return nil, idMapping{}, fmt.Errorf("spec: output: %w", err)
		}
		lim := o.Limits
		cfg.Output = &lim
	}
	if cfg.Mode != BestEffort && cfg.Mode != HardRequirement {
		return nil, idMapping{}, fmt.Errorf("spec: filesystem mode %s", cfg.Mode)
	}
	if s.Filesystem.IncludeWorkdir {
		cfg.ReadWrite = append(append([]string(nil), cfg.ReadWrite...), cfg.Workdir)
	}
	cfg.BaselineReadOnly, cfg.BaselineReadWrite = mergeBaseline(s.Filesystem, cfg.ReadOnly, cfg.ReadWrite)
	cfg.Env = workloadEnv(s.Env, cfg.Workdir, s.ProxyLoopback)
	for _, group := range [][]string{cfg.ReadOnly, cfg.ReadWrite, cfg.BaselineReadOnly, cfg.BaselineReadWrite, cfg.Hidden, {cfg.Workdir, cfg.ResolvConf}} {
		for _, p := range group {
			if !filepath.IsAbs(p) {
				return nil, idMapping{}, fmt.Errorf("spec: path %q is not absolute", p)
			}
		}
	}
	m := idMapping{root: os.Geteuid() == 0, insideUID: s.RunAsUser, insideGID: s.RunAsGroup}
	cfg.Inotify = hostInotifyShare()
	if m.root {
		m.base = s.HostIDBase
		m.count = orDefaultID(s.HostIDCount, DefaultHostIDCount)
		if m.base < DefaultHostIDCount {
			return nil, idMapping{}, fmt.Errorf("spec: as root, HostIDBase must name the sandbox's own host id range, at %d or above (got %d)", DefaultHostIDCount, m.base)
		}
		if uint64(m.base)+uint64(m.count) > math.MaxUint32 {
			return nil, idMapping{}, fmt.Errorf("spec: host id range %d+%d overflows", m.base, m.count)
		}
		if s.RunAsUser >= m.count || s.RunAsGroup >= m.count {
			return nil, idMapping{}, fmt.Errorf("spec: run-as %d:%d outside the %d mapped ids", s.RunAsUser, s.RunAsGroup, m.count)
		}
		m.hostUID, m.hostGID = m.base+s.RunAsUser, m.base+s.RunAsGroup
		cfg.SetGroups = true
	} else {
		m.callerUID, m.callerGID = os.Getuid(), os.Getgid()
		m.hostUID, m.hostGID = uint32(m.callerUID), uint32(m.callerGID)
		m.needAmbientCaps = s.RunAsUser != 0
	}
	return cfg, m, nil
}

// DefaultNoProxy is the workload's NO_PROXY when its policy allows no
// loopback endpoint: requests to its own loopback stay inside the sandbox.
func DefaultNoProxy() []string { return []string{"localhost", "127.0.0.1"} }

// noProxy returns DefaultNoProxy without the hosts that must go through the
// proxy.
func noProxy(viaProxy []string) string {
	var keep []string
	for _, h := range DefaultNoProxy() {
		if !slices.Contains(viaProxy, h) {
			keep = append(keep, h)
		}
	}
	return strings.Join(keep, ",")
}

// mergeBaseline returns the baseline paths to add besides the policy's
// lists (ro and rw as prepared): those the policy does not list itself,
// and, for read-write ones, not when the policy lists them or a path
// beneath them read-only.
func mergeBaseline(fs Filesystem, ro, rw []string) ([]string, []string) {
	listed := func(p string) bool {
		for _, q := range append(append([]string(nil), ro...), rw...) {
			if filepath.Clean(q) == p {
				return true
			}
		}
		return false
	}
	var bro, brw []string
	for _, p := range fs.BaselineReadOnly {
		if p = filepath.Clean(p); !listed(p) && !slices.Contains(bro, p) {
			bro = append(bro, p)
		}
	}
	for _, p := range fs.BaselineReadWrite {
		p = filepath.Clean(p)
		narrower := slices.ContainsFunc(ro, func(q string) bool {
			q = filepath.Clean(q)
			return q == p || strings.HasPrefix(q, p+"/")
		})
		if !narrower && !listed(p) && !slices.Contains(brw, p) {
			brw = append(brw, p)
		}
	}
	bro = slices.DeleteFunc(bro, func(p string) bool { return slices.Contains(brw, p) })
	return bro, brw
}

// workloadEnv returns env with the proxy variables forced (NO_PROXY
// without the loopback hosts viaProxy) and PATH and HOME defaulted.
func workloadEnv(env []string, home string, viaProxy []string) []string {
	np := noProxy(viaProxy)
	forced := []string{
		"HTTP_PROXY=" + ProxyURL, "HTTPS_PROXY=" + ProxyURL,
		"http_proxy=" + ProxyURL, "https_proxy=" + ProxyURL,
		"NO_PROXY=" + np, "no_proxy=" + np,
	}
	out := make([]string, 0, len(env)+len(forced)+2)
	var havePath, haveHome bool
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY":
			continue
		case "PATH":
			havePath = havePath || k == "PATH"
		case "HOME":
			haveHome = haveHome || k == "HOME"
		}
		out = append(out, kv)
	}
	if !havePath {
		out = append(out, defaultPath)
	}
	if !haveHome {
		out = append(out, "HOME="+home)
	}
	return append(out, forced...)
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func orDefaultID(v, d uint32) uint32 {
	if v == 0 {
		return d
	}
	return v
}
