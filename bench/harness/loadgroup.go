package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// The load in a control group. A sandbox's workload runs in a control
// group of its own (sandbox/cgroup), so the load generator inside the
// sandbox is scheduled as one group beside the supervisor, the upstream
// and everything else on the machine, and it pays the group's
// accounting on every switch. On this 2-core machine that alone cost the
// load generator 50-80 µs more CPU per tunnel and took a share of the
// CPUs from the boundary. The system serve-cgroup is `boundary serve`
// (the same process as stockade) loaded by a host loadgen that is put in
// a group made the same way, with the sandbox's limits: the supervisor
// against it compares the two boundaries under the same load.

// serveCgroup is the name of the system.
const serveCgroup = "serve-cgroup"

// startLoadGroup makes serve-cgroup's group, with the limits the
// sandbox's group has (CFS quota, pids, memory), after the sandbox and
// `boundary serve` have started. It is measured only beside a sandbox.
func (h *harness) startLoadGroup(ctx context.Context) {
	s := h.serveCG
	switch {
	case h.stockade.why != "":
		s.why = h.stockade.why
		return
	case h.sandbox.why != "":
		s.why = "only beside the sandbox (" + h.sandbox.why + ")"
		return
	}
	lim, err := h.sandboxLimits(ctx)
	if err != nil {
		s.why = "sandbox limits unknown"
		h.note("%s: %s", serveCgroup, oneLine(err.Error()))
		return
	}
	g, err := cgroup.New(fmt.Sprintf("stockade-bench-load-%d", os.Getpid()), lim)
	if err != nil {
		s.why = "no cgroup"
		h.note("%s: no control group for the load: %s", serveCgroup, oneLine(err.Error()))
		return
	}
	s.group = g
	s.srv, s.pid, s.proxy = h.stockade.srv, h.stockade.pid, h.stockade.proxy
}

// stopLoadGroup removes serve-cgroup's group (every load in it has
// exited).
func (h *harness) stopLoadGroup() {
	s := h.serveCG
	if s == nil || s.group == nil {
		return
	}
	if err := s.group.Remove(); err != nil {
		h.cfg.Log.Warn().Err(err).Msg("load cgroup not removed")
	}
	s.group = nil
}

// sandboxLimits reads the limits of the sandbox's cgroup from `sandbox get
// -o json` (a heartbeat brings them: it waits up to 20 s).
func (h *harness) sandboxLimits(ctx context.Context) (cgroup.Limits, error) {
	g := h.gw
	if g == nil {
		return cgroup.Limits{}, errors.New("no gateway")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := runCmd(ctx, h.dir, g.bin, g.cli("get", sandboxName, "-o", "json")...)
		var st sandboxStatus
		if err == nil {
			st, err = parseSandboxStatus(out)
		}
		switch r := st.Resources; {
		case err == nil && r != nil && r.Enforced && r.Cgroup != "":
			return cgroup.Limits{Pids: r.PidsLimit, MemoryBytes: r.MemoryLimit, CPUs: r.CPUs}, nil
		case err == nil && r != nil && r.Cgroup == "" && r.Note != "" && !strings.HasPrefix(r.Note, "no report"):
			return cgroup.Limits{}, fmt.Errorf("the sandbox's limits are not enforced (%s): nothing to match", r.Note)
		case !time.Now().Before(deadline) || ctx.Err() != nil:
			if err != nil {
				return cgroup.Limits{}, fmt.Errorf("sandbox get reported no limits within 20 s: %w", err)
			}
			return cgroup.Limits{}, errors.New("sandbox get reported no limits within 20 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
