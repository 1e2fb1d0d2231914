package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
)

var bin string // the stockade binary under test

func TestMain(m *testing.M) { os.Exit(testenv.MainWithStockade(m, "../cmd/stockade", &bin)) }

// world is a gateway with its state dir, an offline upstream and a policy.
type world struct {
	t       testing.TB
	state   string
	addr    string
	gw      *exec.Cmd
	gwLog   *lockedBuf
	hosts   string
	policy  string
	webPort int
	gwDone  chan error
	// uid runs the gateway (and so its supervisors) as this user; 0: root.
	uid int
	// gwArgs are extra `gateway run` flags (e.g. --backoff-scale, --chaos).
	gwArgs []string
	// metrics is the gateway's metrics address.
	metrics string
	// stopped: shutdown ran (it runs once).
	stopped bool
	// bindRetries counts restarts that found their port taken.
	bindRetries int
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
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} { // t.TempDir's parent is 0700 too
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(d, uid, uid); err != nil {
		t.Fatal(err)
	}
	return d
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newWorld(t testing.TB, uid int, gwArgs ...string) *world {
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
	w.startGateway()
	t.Cleanup(w.shutdown)
	return w
}

func write(t testing.TB, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (w *world) startGateway() {
	w.t.Helper()
	listen := "127.0.0.1:0"
	if w.addr != "" {
		listen = w.addr // a restart keeps the address supervisors know
	}
	w.gwLog, w.stopped = &lockedBuf{}, false
	args := append([]string{"gateway", "run", "--state-dir", w.state, "--listen", listen, "--relay-listen", "127.0.0.1:0",
		"--hosts", w.hosts, "--allow-loopback-upstream", "--log-format", "json", "--metrics", "127.0.0.1:0"}, w.gwArgs...)
	w.gw = exec.Command(bin, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		w.t.Fatal(err)
	}
	w.gw.Stdout, w.gw.Stderr = pw, pw
	if w.uid != 0 {
		w.gw.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(w.uid), Gid: uint32(w.uid)}}
	}
	if err := w.gw.Start(); err != nil {
		w.t.Fatal(err)
	}
	_ = pw.Close()
	ready, metrics := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = w.gwLog.Write([]byte(line + "\n"))
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "gateway ready" {
				ready <- m["api"].(string)
			}
			if m["msg"] == "metrics serving" {
				metrics <- m["addr"].(string)
			}
		}
	}()
	w.gwDone = make(chan error, 1)
	cmd := w.gw
	go func() { w.gwDone <- cmd.Wait() }()
	select {
	case w.addr = <-ready:
		select {
		case w.metrics = <-metrics:
		default:
		}
	case err := <-w.gwDone:
		// A restart keeps its port (supervisors know it); an outgoing
		// connection of another process may hold that (ephemeral) port
		// for a moment: try again.
		if listen != "127.0.0.1:0" && strings.Contains(w.gwLog.String(), "address already in use") && w.bindRetries < 40 {
			w.bindRetries++
			time.Sleep(250 * time.Millisecond)
			w.startGateway()
			return
		}
		w.t.Fatalf("gateway exited: %v\n%s", err, w.gwLog)
	case <-time.After(20 * time.Second):
		w.t.Fatalf("gateway not ready in 20 s\n%s", w.gwLog)
	}
}

// killGateway SIGKILLs the gateway (its sandboxes keep running).
func (w *world) killGateway() {
	_ = w.gw.Process.Signal(syscall.SIGKILL)
	<-w.gwDone
}

// shutdown stops the gateway and kills every supervisor of this state dir.
func (w *world) shutdown() {
	if w.stopped {
		return
	}
	w.stopped = true
	_ = w.gw.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.gwDone:
	case <-time.After(10 * time.Second):
		_ = w.gw.Process.Kill()
	}
	for _, pid := range supervisorsOf(w.state) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if w.t.Failed() {
		w.t.Logf("gateway log:\n%s", w.gwLog)
	}
}

// supervisorsOf lists supervisor processes whose spec lies under state.
func supervisorsOf(state string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(b), "supervisor\x00--spec\x00") && strings.Contains(string(b), state) {
			out = append(out, pid)
		}
	}
	return out
}

// cli runs a client verb; it returns stdout, stderr and the exit code.
func (w *world) cli(args ...string) (string, string, int) {
	w.t.Helper()
	cmd := exec.Command(bin, append([]string{"sandbox", "--state-dir", w.state}, args...)...)
	cmd.Env = append(os.Environ(), "STOCKADE_GATEWAY="+w.addr)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// status is `sandbox get -o json`.
type status struct {
	Name             string           `json:"name"`
	Phase            string           `json:"phase"`
	Reason           string           `json:"reason"`
	Message          string           `json:"message"`
	RecoveryAttempts int              `json:"recoveryAttempts"`
	Workspace        string           `json:"workspace"`
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
