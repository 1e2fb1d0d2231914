package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/internal/testworld"
)

var bin string // the stockade binary under test

func TestMain(m *testing.M) {
	if targets := os.Getenv(halfOpenTargetsEnv); targets != "" { // TestHalfOpenFloodFromALocalUser's attacker
		n, _ := strconv.Atoi(os.Getenv(halfOpenCountEnv))
		os.Exit(halfOpenAttacker(strings.Split(targets, ","), n))
	}
	if code, ok := hoardChild(); ok { // TestHalfOpenHoardsLeaveTheAdmin's attackers
		os.Exit(code)
	}
	os.Exit(testenv.MainWithStockade(m, "../cmd/stockade", &bin))
}

// world is a gateway with its state dir, an offline upstream and a policy.
type world struct {
	t       testing.TB
	state   string
	addr    string
	proc    *testworld.Process
	gw      *exec.Cmd // proc.Cmd
	gwLog   *testworld.Log
	hosts   string
	policy  string
	webPort int
	// gwDone receives the current gateway's exit error once it exits.
	gwDone chan error
	// uid runs the gateway (and so its supervisors) as this user; 0: root.
	uid int
	// gwArgs are extra `gateway run` flags (e.g. --backoff-scale, --chaos).
	gwArgs []string
	// metrics is the gateway's metrics address.
	metrics string
}

// nobody is the unprivileged user the "unprivileged" runs use.
const nobody = 65534

// modes runs f with the gateway as root and as an unprivileged user (issue
// 3, point 6): as root the sandbox's uids map to the reserved host range;
// unprivileged, only the gateway's own uid is mapped.
func modes(t *testing.T, f func(t *testing.T, w *world)) {
	for _, m := range []struct {
		name string
		uid  int
	}{{"root", 0}, {"unprivileged", nobody}} {
		t.Run(m.name, func(t *testing.T) { f(t, newWorld(t, m.uid)) })
	}
}

// sharedDir is a temp dir the unprivileged gateway can use.
func sharedDir(t testing.TB, uid int) string {
	t.Helper()
	return testworld.Dir(t, uid)
}

func newWorld(t testing.TB, uid int, gwArgs ...string) *world {
	t.Helper()
	w := prepareWorld(t, uid, gwArgs...)
	w.startGateway()
	t.Cleanup(w.shutdown)
	return w
}

// prepareWorld makes a world's files and upstream, without a gateway.
func prepareWorld(t testing.TB, uid int, gwArgs ...string) *world {
	t.Helper()
	testenv.NeedRoot(t) // to map a host uid range, and to run a gateway as another user
	testenv.NeedTool(t, "curl", "curl")
	w := &world{t: t, state: sharedDir(t, uid), uid: uid, gwArgs: gwArgs}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "upstream says hi to %s", r.Host)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	w.webPort = ln.Addr().(*net.TCPAddr).Port
	files := sharedDir(t, 0)
	w.hosts = filepath.Join(files, "hosts")
	w.policy = filepath.Join(files, "policy.yaml")
	write(t, w.hosts, "127.0.0.1 api.test other.test\n")
	write(t, w.policy, fmt.Sprintf(`version: 1
filesystem_policy:
  read_only: [/usr, /lib, /lib64, /bin, /sbin, /etc]
  read_write: [/sandbox, /tmp, /dev/null]
landlock:
  compatibility: best_effort
network_policies:
  api:
    name: api
    endpoints: [{ host: api.test, port: %d }]
    binaries: [{ path: /usr/bin/curl }]
`, w.webPort))
	return w
}

func write(t testing.TB, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startGateway starts (or restarts, on the same API address) the gateway
// and waits for its ready file.
func (w *world) startGateway() {
	w.t.Helper()
	listen := "127.0.0.1:0"
	if w.addr != "" {
		listen = w.addr // a restart keeps the address supervisors know
	}
	args := append([]string{"gateway", "run", "--state-dir", w.state, "--listen", listen, "--relay-listen", "127.0.0.1:0",
		"--hosts", w.hosts, "--allow-loopback-upstream", "--log-format", "json", "--metrics", "127.0.0.1:0"}, w.gwArgs...)
	// A restart keeps its port; an outgoing connection of another process
	// may hold that (ephemeral) port for a moment: RetryInUse.
	p := testworld.Start(w.t, testworld.Spec{Bin: bin, Args: args, Name: "gateway", UID: w.uid,
		Timeout: 20 * time.Second, RetryInUse: 10 * time.Second})
	w.proc, w.gw, w.gwLog, w.addr, w.metrics = p, p.Cmd, p.Log, p.Addrs.API, p.Addrs.Metrics
	w.gwDone = make(chan error, 1)
	go func(done chan<- error) { done <- p.Err() }(w.gwDone)
}

// killGateway SIGKILLs the gateway (its sandboxes keep running).
func (w *world) killGateway() {
	if err := w.proc.Kill(); err != nil {
		w.t.Fatal(err)
	}
}

// shutdown stops the gateway and kills every supervisor of this state dir.
// A gateway that stops cleanly must have removed its ready file.
func (w *world) shutdown() {
	if err := w.proc.Stop(10 * time.Second); err == nil {
		if _, err := os.Stat(w.proc.ReadyFile); !errors.Is(err, fs.ErrNotExist) {
			w.t.Errorf("the gateway left its ready file after a clean exit (stat: %v)", err)
		}
	}
	for _, pid := range testworld.SupervisorsOf(w.state) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = testworld.RemoveGroupsOf(w.state, 3*time.Second)
}

// cli runs a client verb; it returns stdout, stderr and the exit code.
func (w *world) cli(args ...string) (string, string, int) {
	w.t.Helper()
	cmd := exec.Command(bin, append([]string{"sandbox", "--state-dir", w.state}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+w.addr)
	return runCmd(w.t, cmd)
}

// runCmd runs cmd to its end and returns its stdout, stderr and exit code;
// a command that cannot run at all fails the test.
func runCmd(t testing.TB, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), code
}

// status is `sandbox get -o json`.
type status struct {
	Name             string           `json:"name"`
	Node             string           `json:"node"`
	Phase            string           `json:"phase"`
	Since            string           `json:"since"`
	Reason           string           `json:"reason"`
	Message          string           `json:"message"`
	RecoveryAttempts int              `json:"recoveryAttempts"`
	Workspace        string           `json:"workspace"`
	HostIDs          string           `json:"hostIds"`
	SupervisorPid    int              `json:"supervisorPid"`
	WorkloadPid      int              `json:"workloadPid"`
	Restarts         map[string]int64 `json:"restarts"`
	Transitions      []struct {
		From, To, Reason string
	} `json:"transitions"`
}

func (w *world) get(name string) (status, int) {
	w.t.Helper()
	out, errOut, code := w.cli("get", name, "-o", "json")
	var s status
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			w.t.Fatalf("get %s: %v\n%s%s", name, err, out, errOut)
		}
	}
	return s, code
}

// waitPhase polls until the sandbox is in phase (and cond holds).
func (w *world) waitPhase(name, phase string, timeout time.Duration, cond func(status) bool) status {
	w.t.Helper()
	var last status
	testenv.Eventually(w.t, timeout, func() bool {
		s, code := w.get(name)
		last = s
		return code == 0 && s.Phase == phase && (cond == nil || cond(s))
	}, "sandbox %s to reach %s (last: %+v)", name, phase, &last)
	return last
}

// create makes a sandbox running script under sh and waits for Ready.
func (w *world) create(name, script string, extra ...string) status {
	w.t.Helper()
	args := append([]string{"create", name, "--policy", w.policy}, extra...)
	args = append(args, "--", "/bin/sh", "-c", script)
	out, errOut, code := w.cli(args...)
	if code != 0 {
		w.t.Fatalf("create %s: exit %d\n%s%s", name, code, out, errOut)
	}
	if !strings.Contains(out, name+": Provisioning") || !strings.Contains(out, name+": Ready") {
		w.t.Fatalf("create did not show the phases as they passed:\n%s", out)
	}
	s, _ := w.get(name)
	return s
}

// file waits for a file the workload writes into its workspace.
func (w *world) file(s status, name string) string {
	w.t.Helper()
	return w.fileWithin(s, name, 15*time.Second)
}

// fileWithin is file with its own deadline (for slow work: a flood).
func (w *world) fileWithin(s status, name string, d time.Duration) string {
	w.t.Helper()
	p := filepath.Join(s.Workspace, name)
	var b []byte
	testenv.Eventually(w.t, d, func() bool {
		var err error
		b, err = os.ReadFile(p)
		return err == nil && bytes.HasSuffix(b, []byte("\n"))
	}, "workload to write %s", p)
	return string(b)
}
