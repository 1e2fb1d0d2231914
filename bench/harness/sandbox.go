package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/stockade-dev/stockade/internal/testworld"
)

// The sandbox system: a real gateway (`stockade gateway run`, its own state
// dir under the run dir) and one sandbox under the generated policy; the
// loads run inside it through `stockade sandbox exec`, against the
// supervisor's boundary.
const (
	// sandboxName is the sandbox the harness creates.
	sandboxName = "bench"
	// sandboxProxy is the boundary's proxy inside every sandbox: port
	// sandbox/nsrun.ProxyPort on the sandbox's loopback, what the
	// workload's HTTPS_PROXY (nsrun.ProxyURL) names.
	sandboxProxy = "127.0.0.1:3128"
	// sandboxLoadgen is the loadgen binary as the sandbox sees it: the
	// harness copies it into the workspace, mounted at /sandbox.
	sandboxLoadgen = "/sandbox/loadgen"
	// sandboxOff is the sandbox system's why when it is turned off.
	sandboxOff = "off (-sandbox=false)"
)

// gatewayRun is the harness's gateway and its sandbox.
type gatewayRun struct {
	bin     string  // the stockade binary
	state   string  // --state-dir
	api     string  // the API address from the ready file
	srv     *server // the gateway process
	created bool    // the sandbox exists (delete it)
}

// cli returns the arguments of a `stockade sandbox` verb against this
// gateway.
func (g *gatewayRun) cli(verb string, args ...string) []string {
	return append([]string{"sandbox", "--state-dir", g.state, "--gateway", g.api, "--log-format", "json", verb}, args...)
}

// execArgs are the arguments of `stockade sandbox exec` running loadgen
// with args inside the sandbox, killed there after d plus a margin.
func (g *gatewayRun) execArgs(d time.Duration, args []string) []string {
	return append(g.cli("exec", sandboxName, "--timeout", (d+20*time.Second).String(), "--", sandboxLoadgen), args...)
}

// gatewayReady is what `gateway run --ready-file` writes.
type gatewayReady struct {
	API string `json:"api"`
	PID int    `json:"pid"`
}

// sandboxStatus is the part of `sandbox get -o json` the harness reads.
type sandboxStatus struct {
	Phase         string `json:"phase"`
	Message       string `json:"message"`
	Workspace     string `json:"workspace"`
	SupervisorPid int    `json:"supervisorPid"`
	// Resources are the limits of its cgroup, once a heartbeat has said.
	Resources *struct {
		Enforced    bool    `json:"enforced"`
		Cgroup      string  `json:"cgroup"` // "v1" or "v2"; "" until a heartbeat says
		Note        string  `json:"note"`
		PidsLimit   int64   `json:"pidsLimit"`
		MemoryLimit int64   `json:"memoryLimitBytes"`
		CPUs        float64 `json:"cpus"`
	} `json:"resources"`
}

// parseSandboxStatus decodes `sandbox get -o json` and wants a Ready
// sandbox with a workspace and a supervisor.
func parseSandboxStatus(out []byte) (sandboxStatus, error) {
	var st sandboxStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("sandbox get output %q: %w", firstLine(string(out)), err)
	}
	switch {
	case st.Phase != "Ready":
		return st, fmt.Errorf("sandbox is %s (%s), not Ready", st.Phase, st.Message)
	case st.Workspace == "" || st.SupervisorPid <= 0:
		return st, fmt.Errorf("sandbox get names no workspace (%q) or supervisor pid (%d)", st.Workspace, st.SupervisorPid)
	}
	return st, nil
}

// startSandbox starts the gateway, creates the sandbox, puts loadgen in
// its workspace and probes its proxy. Any failure leaves h.sandbox.why
// set (the rows say it) and a note with the details; it never fails the
// run.
func (h *harness) startSandbox(ctx context.Context, bin string) {
	s := h.sandbox
	fail := func(why string, err error) {
		s.why = why
		h.note("sandbox: %s: %s", why, oneLine(err.Error()))
		h.cfg.Log.Warn().Err(err).Msg("sandbox: " + why)
	}
	if os.Geteuid() != 0 {
		s.why = "needs root"
		h.note("sandbox: not measured: a gateway maps a host uid range into each sandbox's user namespace, which needs root (run as root)")
		return
	}
	g := &gatewayRun{bin: bin, state: filepath.Join(h.dir, "gateway-state")}
	if err := os.MkdirAll(g.state, 0o755); err != nil {
		fail("no state dir", err)
		return
	}
	ready := filepath.Join(h.dir, "gateway.ready")
	srv, err := h.srvs.start("gateway", bin, "gateway", "run", "--state-dir", g.state,
		"--listen", "127.0.0.1:0", "--relay-listen", "127.0.0.1:0", "--hosts", h.files.hosts,
		"--allow-loopback-upstream", "--log-format", "json", "--ready-file", ready)
	if err != nil {
		fail("gateway did not start", err)
		return
	}
	g.srv = srv
	h.gw = g
	err = srv.waitFor(ctx, 30*time.Second, func() error {
		b, err := os.ReadFile(ready)
		if err != nil {
			return err
		}
		var r gatewayReady
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("ready file: %w", err)
		}
		if r.PID != srv.pid() || r.API == "" {
			return fmt.Errorf("ready file names pid %d and api %q (want pid %d)", r.PID, r.API, srv.pid())
		}
		g.api = r.API
		return nil
	})
	if err != nil {
		fail("gateway not ready", err)
		return
	}
	h.cfg.Log.Info().Str("api", g.api).Msg("creating the sandbox")
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	g.created = true // a failed create may still leave one behind: delete it
	if _, err := runCmd(cctx, h.dir, bin, g.cli("create", sandboxName, "--policy", h.files.policy, "--timeout", "60s")...); err != nil {
		fail("sandbox not created", err)
		return
	}
	out, err := runCmd(cctx, h.dir, bin, g.cli("get", sandboxName, "-o", "json")...)
	if err != nil {
		fail("sandbox not readable", err)
		return
	}
	st, err := parseSandboxStatus(out)
	if err != nil {
		fail("sandbox not ready", err)
		return
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", st.SupervisorPid)); err != nil || !testworld.IsSupervisorOf(cmdline, g.state) {
		if err != nil {
			fail("no supervisor", fmt.Errorf("pid %d from sandbox get: read its cmdline: %w", st.SupervisorPid, err))
		} else {
			fail("no supervisor", fmt.Errorf("pid %d from sandbox get is not a supervisor of %s (cmdline %q)", st.SupervisorPid, g.state, cmdline))
		}
		return
	}
	if err := copyFile(h.loadgen, filepath.Join(st.Workspace, filepath.Base(sandboxLoadgen)), 0o755); err != nil {
		fail("loadgen not copied", err)
		return
	}
	s.pid, s.proxy = st.SupervisorPid, sandboxProxy
	if err := h.probeProxy(ctx, s); err != nil {
		fail("not serving", err)
		return
	}
	h.cfg.Log.Info().Str("server", s.name).Int("supervisor", s.pid).Msg("serving")
}

// stopSandbox deletes the sandbox, stops the gateway and kills any
// supervisor of its state dir still running. It is idempotent and runs
// even when ctx is done.
func (h *harness) stopSandbox(ctx context.Context) {
	g := h.gw
	if g == nil {
		return
	}
	h.gw = nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 40*time.Second)
	defer cancel()
	if g.created && g.api != "" && !g.srv.exited() {
		if _, err := runCmd(ctx, h.dir, g.bin, g.cli("delete", sandboxName, "--timeout", "30s")...); err != nil {
			h.cfg.Log.Warn().Err(err).Msg("sandbox delete")
		}
	}
	g.srv.stop()
	pids := testworld.SupervisorsOf(g.state)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(pids) > 0 {
		h.cfg.Log.Info().Ints("pids", pids).Msg("killed leftover supervisors")
	}
	if err := testworld.RemoveGroupsOf(g.state, 3*time.Second); err != nil {
		h.cfg.Log.Warn().Err(err).Msg("sandbox cgroup left behind")
	}
}

// alive says whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && !bytes.HasPrefix(b[i+1:], []byte(" Z"))
}

// copyFile copies src to dst with mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	return errors.Join(os.Chmod(dst, perm))
}
