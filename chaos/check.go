package chaos

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stockade-dev/stockade/contract"
)

// checkWorkspaces: every file an exec wrote and acknowledged (exit status
// came back) is in the workspace with its checksum.
func (r *runner) checkWorkspaces() {
	r.l.mu.Lock()
	files := append([]ackedFile(nil), r.l.files...)
	r.l.mu.Unlock()
	for _, f := range files {
		p := filepath.Join(r.w.state, "sandboxes", f.sandbox, "workspace", f.path)
		b, err := os.ReadFile(p)
		if err != nil {
			r.violate("workspace-intact", "%s: acknowledged file %s: %v", f.sandbox, f.path, err)
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.sha {
			r.violate("workspace-intact", "%s: acknowledged file %s has other content (%d bytes)", f.sandbox, f.path, len(b))
		}
	}
	r.check("workspace-intact", len(files))
}

// checkAudit: every denial a client saw has an audit event in its
// sandbox's audit file with the same host (or name) and reason.
func (r *runner) checkAudit() {
	r.l.mu.Lock()
	denials := map[string]map[string]int{}
	total := 0
	for s, m := range r.l.denials {
		denials[s] = map[string]int{}
		for k, v := range m {
			denials[s][k] = v
			total += v
		}
	}
	r.l.mu.Unlock()
	for sandbox, want := range denials {
		got, err := auditDenials(r.w.logDir(sandbox))
		if err != nil {
			r.violate("denials-audited", "%s: %v", sandbox, err)
			continue
		}
		for k, n := range want {
			if got[k] < n {
				r.violate("denials-audited", "%s: clients saw %d denials %s, the audit has %d", sandbox, n, k, got[k])
			}
		}
	}
	r.check("denials-audited", total)
}

// auditDenials counts denial events per "host|reason" in a sandbox's audit
// files (the current one and rotated ones); DNS refusals count as
// "name|REFUSED".
func auditDenials(dir string) (map[string]int, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "audit.jsonl*"))
	if len(paths) == 0 {
		return nil, fmt.Errorf("no audit file in %s", dir)
	}
	out := map[string]int{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var e struct {
				Disposition string `json:"disposition"`
				Reason      string `json:"status_detail"`
				Dst         *struct {
					Hostname string `json:"hostname"`
				} `json:"dst_endpoint"`
				Query *struct {
					Hostname string `json:"hostname"`
					Rcode    string `json:"rcode"`
				} `json:"query"`
			}
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Disposition != "Blocked" {
				continue
			}
			switch {
			case e.Query != nil && e.Query.Rcode == "REFUSED":
				out[strings.TrimSuffix(e.Query.Hostname, ".")+"|REFUSED"]++
			case e.Dst != nil:
				out[e.Dst.Hostname+"|"+e.Reason]++
			}
		}
		_ = f.Close()
	}
	return out, nil
}

// checkQuiet: sandboxes that only took connection-level faults kept their
// session, relay and boundary actors (no restart, no stop of a session or
// relay) and never left Ready. (A cluster run checks the counters across
// each connection-level step instead: node faults hit every sandbox, and a
// fenced node's actors restart and stop by design.)
func (r *runner) checkQuiet(ctx context.Context) {
	if r.w.cl != nil {
		return
	}
	n := 0
	for _, name := range r.names {
		if !r.quiet[name] {
			continue
		}
		st, err := r.w.get(ctx, name)
		if err != nil {
			r.violate("quiet-stay-ready", "%s: %v", name, err)
			continue
		}
		n++
		for kind, v := range st.Restarts {
			if v != 0 {
				r.violate("quiet-stay-ready", "%s: %s restarts %d after connection-level faults only", name, kind, v)
			}
		}
	}
	r.check("quiet-stay-ready", n)
}

// checkPolicies: every sandbox runs the last policy version set on it.
func (r *runner) checkPolicies(ctx context.Context) {
	for _, name := range r.names {
		st, err := r.w.get(ctx, name)
		if err != nil {
			r.violate("policy-kept", "%s: %v", name, err)
			continue
		}
		r.mu.Lock()
		want := uint64(r.policyRev[name] + 1)
		r.mu.Unlock()
		r.check("policy-kept", 1)
		if st.PolicyVersion != want {
			r.violate("policy-kept", "%s: policy version %d, want %d after %d reloads", name, st.PolicyVersion, want, want-1)
		}
	}
}

// procs is a snapshot of /proc: parent and command line of each process.
type proc struct {
	ppid int
	cmd  string
}

func procs() map[int]proc {
	out := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces; cut at the last ')'.
		i := strings.LastIndexByte(string(st), ')')
		f := strings.Fields(string(st)[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out[pid] = proc{ppid: ppid, cmd: strings.ReplaceAll(string(b), "\x00", " ")}
	}
	return out
}

// sandboxNamespaces adds to seen the namespaces of every process below a
// supervisor of this run (the sandboxes' init and workloads) that the
// supervisor itself is not in: the namespaces the run made.
func sandboxNamespaces(state string, seen map[string]bool) {
	ps := procs()
	isOurs := func(pid int) (int, bool) {
		sup, ok := firstAbove(ps, pid, func(_ int, pr proc) bool { return supervisorCmd(pr.cmd) })
		return sup, ok && sup != pid && strings.Contains(ps[sup].cmd, state)
	}
	for pid := range ps {
		sup, ok := isOurs(pid)
		if !ok {
			continue
		}
		for _, ns := range []string{"user", "pid", "net", "mnt"} {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
			own, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", sup, ns))
			if err == nil && l != own {
				seen[l] = true
			}
		}
	}
}

// ofRun: a process of the run in dir (its command line names a path in
// it), other than the harness itself (whose --dir may name it).
func ofRun(pid int, cmd, dir string) bool {
	return pid != os.Getpid() && strings.Contains(cmd, strings.TrimSuffix(dir, "/")+"/")
}

// leftovers lists processes of this run (their command line names the
// run's dir) and processes still in a namespace the run made.
func leftovers(dir string, made map[string]bool) []string {
	var out []string
	ps := procs()
	for pid, p := range ps {
		if p.cmd == "" {
			continue // a kernel thread
		}
		if ofRun(pid, p.cmd, dir) {
			out = append(out, fmt.Sprintf("process %d still runs: %s", pid, clip(p.cmd)))
			continue
		}
		if ofOtherTest(ps, os.Getpid(), pid, dir) {
			continue
		}
		for _, ns := range []string{"user", "pid", "net", "mnt"} {
			if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)); err == nil && made[l] {
				out = append(out, fmt.Sprintf("process %d (%s) is still in %s, made by a sandbox of the run", pid, clip(p.cmd), l))
				break
			}
		}
	}
	return out
}

// ofOtherTest reports whether pid runs below a supervisor of another
// run's sandbox (its --spec is outside dir) or below another test binary.
// The kernel reuses the number of a namespace once it is freed: a sandbox
// of this run that ended may lend its namespace's number to one that a
// test running beside this one (make test runs packages side by side)
// makes next, and that sandbox's processes are not this run's leftovers.
// A real orphan of this run has lost its supervisor: nothing of another
// test is above it, and it still counts.
func ofOtherTest(ps map[int]proc, self, pid int, dir string) bool {
	p, ok := firstAbove(ps, pid, func(p int, pr proc) bool {
		exe, _, _ := strings.Cut(pr.cmd, " ")
		return p == self || supervisorCmd(pr.cmd) || strings.HasSuffix(exe, ".test")
	})
	switch {
	case !ok || p == self:
		return false
	case supervisorCmd(ps[p].cmd):
		return !ofRun(p, ps[p].cmd, dir)
	}
	return true // another test binary
}

// firstAbove returns pid, or its nearest ancestor, for which match holds;
// false when none does below pid 1 (or a process vanished while ps was
// read).
func firstAbove(ps map[int]proc, pid int, match func(pid int, pr proc) bool) (int, bool) {
	for p, hops := pid, 0; p > 1 && hops < 64; hops++ {
		pr, ok := ps[p]
		if !ok {
			return 0, false
		}
		if match(p, pr) {
			return p, true
		}
		p = pr.ppid
	}
	return 0, false
}

// supervisorCmd: cmd (arguments joined by spaces) is a stockade
// supervisor's command line.
func supervisorCmd(cmd string) bool {
	return strings.Contains(cmd, " supervisor ") && strings.Contains(cmd, "--spec ")
}

// logDir is the log directory of the current creation of sandbox (a
// deleted sandbox's is removed, so there is at most one).
func (w *world) logDir(sandbox string) string {
	sb := filepath.Join(contract.StateDir(w.state).Sandboxes(), sandbox)
	if dirs, _ := filepath.Glob(filepath.Join(sb, contract.LogsDir, "*")); len(dirs) > 0 {
		return dirs[len(dirs)-1]
	}
	return sb
}

// anyBroken reports whether an invariant broke so far (exec outcomes
// included).
func (r *runner) anyBroken() bool {
	r.l.mu.Lock()
	bad := len(r.l.bad)
	r.l.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return bad > 0 || len(r.broken) > 0
}

// keepLogs copies every sandbox's log directories (supervisor, lifecycle,
// audit, workload) to DIR/kept-logs/NAME/ before the run deletes the
// sandboxes: the evidence of a broken invariant.
func (r *runner) keepLogs() {
	for _, n := range r.names {
		dirs, _ := filepath.Glob(filepath.Join(contract.StateDir(r.w.state).Sandboxes(), n, contract.LogsDir, "*"))
		for _, d := range dirs {
			files, _ := os.ReadDir(d)
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(d, f.Name()))
				if err != nil {
					continue
				}
				to := filepath.Join(r.w.dir, "kept-logs", n, filepath.Base(d))
				if os.MkdirAll(to, 0o755) == nil {
					_ = os.WriteFile(filepath.Join(to, f.Name()), b, 0o644)
				}
			}
		}
	}
}
