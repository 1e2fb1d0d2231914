package supervisor

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
	"github.com/stockade-dev/stockade/sandbox/spec"
)

// resources are the sandbox's cgroup (nil: limits not enforced) and what
// the heartbeats report of it.
type resources struct {
	limits    spec.Limits
	group     cgroup.Group
	groupName string // the group's name (cgroup.SandboxGroup)
	log       zerolog.Logger
	note      string // why limits are not enforced
	ioNote    string // why the io limit is not
	workspace string
	wsBytes   atomic.Int64
	baseOOM   int64
	stop      chan struct{}
	once      sync.Once

	// logStats are the workload log's bytes on disk and lines dropped
	// (nil: none reported).
	logStats func() (diskBytes, dropped int64)
}

// openResources makes the sandbox's cgroup under the supervisor's own.
// Without one (an unprivileged gateway and no delegated cgroup) the
// sandbox runs unlimited, and says so once in the log and in every report.
func openResources(sp spec.Supervisor, dir string, log zerolog.Logger) *resources {
	r := &resources{limits: sp.Limits, workspace: sp.Workspace, stop: make(chan struct{}), log: log}
	go r.measureWorkspace()
	if sp.Unconfined {
		r.note = "unconfined (benchmark)"
		return r
	}
	lim := cgroup.Limits{Pids: sp.Limits.Pids, MemoryBytes: sp.Limits.MemoryBytes, CPUs: sp.Limits.CPUs}
	if sp.Limits.IOBps > 0 {
		dev, err := cgroup.BlockDevice(sp.Workspace)
		if err != nil {
			r.ioNote = "io not limited: " + err.Error()
			log.Warn().Err(err).Msg("io limit not enforced")
		} else {
			lim.IOBps, lim.IODevice = sp.Limits.IOBps, dev
		}
	}
	r.groupName = cgroup.SandboxGroup(sp.Name, dir)
	g, err := cgroup.New(r.groupName, lim)
	if err != nil {
		r.note = strings.TrimPrefix(err.Error(), cgroup.ErrNotEnforced.Error()+": ")
		log.Warn().Err(err).Msg("resource limits not enforced for this sandbox")
	} else {
		r.group = g
	}
	return r
}

// started records the OOM kills so far (a reused group keeps its count).
func (r *resources) started() {
	if r.group != nil {
		if u, err := r.group.Usage(); err == nil {
			r.baseOOM = u.OOMKills
		}
	}
}

// oomDetail says "out of memory (limit X)" when the kernel killed for
// memory since the start.
func (r *resources) oomDetail() string {
	if r.group == nil {
		return ""
	}
	u, err := r.group.Usage()
	if err != nil || u.OOMKills <= r.baseOOM {
		return ""
	}
	return fmt.Sprintf("out of memory (limit %s)", cgroup.FormatBytes(r.limits.MemoryBytes))
}

// report is the heartbeat's view.
func (r *resources) report() *messages.Resources {
	note := r.note
	if note == "" {
		note = r.ioNote
	}
	m := &messages.Resources{Limits: &messages.Limits{Pids: r.limits.Pids, MemoryBytes: r.limits.MemoryBytes, Cpus: r.limits.CPUs, IoBps: r.limits.IOBps,
		LogBytes: r.limits.LogBytes, LogLinesPerSec: r.limits.LogLinesPerSec, LogBurst: r.limits.LogBurst},
		Enforced: r.group != nil, Note: note, WorkspaceBytes: r.wsBytes.Load(),
		// Measured, not capped: a size limit needs project quotas, which
		// stockade does not set up.
		WorkspaceNote: "size measured, not limited (no project quota)"}
	if r.logStats != nil {
		m.LogBytes, m.LogDroppedLines = r.logStats()
	}
	if r.group != nil {
		m.Cgroup = r.group.Version()
		if u, err := r.group.Usage(); err == nil {
			m.MemoryBytes, m.Pids, m.CpuMs, m.OomKills, m.IoBytes = u.MemoryBytes, u.Pids, u.CPU.Milliseconds(), u.OOMKills-r.baseOOM, u.IOBytes
		}
	}
	return m
}

// measureWorkspace sums the workspace's file sizes every 10 s (at most
// 200,000 entries a pass: a bound on the work, the sum is then a floor).
func (r *resources) measureWorkspace() {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		r.wsBytes.Store(workspaceBytes(r.workspace, 200000))
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// workspaceBytes sums the sizes of the regular files under dir, reading at
// most limit entries. The workload writes there while this runs as host
// root: the walk goes through an os.Root of dir, so a directory the
// workload swaps for a link to elsewhere on the host between the listing
// and the descent is an error there, never followed out of dir (a
// pass over a path would list and size the host's files instead).
func workspaceBytes(dir string, limit int) int64 {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0
	}
	defer root.Close()
	var sum int64
	n := 0
	_ = fs.WalkDir(root.FS(), ".", func(_ string, d fs.DirEntry, err error) error {
		if n++; n > limit {
			return fs.SkipAll
		}
		if err != nil {
			return nil // that entry (a raced or escaping one) is left out
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				sum += fi.Size()
			}
		}
		return nil
	})
	return sum
}

// close stops measuring and removes the group once its processes are
// gone (the sandbox's pid namespace dies with init).
func (r *resources) close() {
	r.once.Do(func() {
		close(r.stop)
		if r.group == nil {
			return
		}
		if err := cgroup.RemoveNamed(r.groupName, 3*time.Second); err != nil {
			r.log.Warn().Err(err).Msg("sandbox cgroup not removed (the gateway removes it when the sandbox is deleted)")
		}
	})
}
