package nsrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/internal/testenv"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestExitStatusAndWorkspace(t *testing.T) {
	needSandbox(t)
	for _, tc := range []struct {
		script string
		want   ExitStatus
	}{
		{"echo hi > /sandbox/out", ExitStatus{Code: 0}},
		{"echo hi > /sandbox/out; exit 7", ExitStatus{Code: 7}},
		{"echo hi > /sandbox/out; kill -KILL $$", ExitStatus{Code: -1, Signal: syscall.SIGKILL}},
	} {
		t.Run(tc.want.String(), func(t *testing.T) {
			spec := bashSpec(t, tc.script)
			sb := start(t, spec)
			if got := wait(t, sb); got != tc.want {
				t.Fatalf("status %s, want %s", got, tc.want)
			}
			if got := readWS(t, spec, "out"); got != "hi" {
				t.Fatalf("workspace file %q, want hi", got)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(spec.Workspace, "out"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != testIDBase || st.Gid != testIDBase {
				t.Fatalf("workspace file owned by %d:%d on the host, want the mapped %d:%d", st.Uid, st.Gid, testIDBase, testIDBase)
			}
		})
	}
}

// TestWorkloadCannotTakeTheProxyPort plays a hostile workload that binds
// 127.0.0.1:3128 itself, first thing, with SO_REUSEADDR and SO_REUSEPORT,
// to stand in for the boundary before it listens: the port is taken
// before the workload runs (as root the parent made the listener before
// init started anything), so the bind is refused, and a connection to the
// port still reaches the parent's listener.
func TestWorkloadCannotTakeTheProxyPort(t *testing.T) {
	needSandbox(t)
	testenv.NeedTool(t, "perl", "perl-base")
	spec := bashSpec(t, `
perl -MSocket -e 'socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!";
setsockopt($s, SOL_SOCKET, SO_REUSEADDR, 1) or die "SO_REUSEADDR: $!";
setsockopt($s, SOL_SOCKET, SO_REUSEPORT, 1) or die "SO_REUSEPORT: $!";
if (bind($s, pack_sockaddr_in(3128, inet_aton("127.0.0.1"))) && listen($s, 8)) { print "bound\n" } else { print "refused: ", $!+0, "\n" }' > /sandbox/bind 2>&1
exec 3<>/dev/tcp/127.0.0.1/3128; printf x >&3; read -r -n1 -u 3 b; exec 3<&-
`)
	sb := start(t, spec)
	proxy, _, _, _ := sb.Listeners()
	c, err := acceptBy(proxy, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatalf("proxy accept: %v", err)
	}
	buf := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("the workload's byte on the parent's listener: %q %v", buf, err)
	}
	mustWrite(t, c, "y")
	if st := wait(t, sb); !st.Success() {
		t.Fatalf("workload: %s", st)
	}
	if got, want := readWS(t, spec, "bind"), fmt.Sprintf("refused: %d", int(unix.EADDRINUSE)); got != want {
		t.Fatalf("the workload's bind of 127.0.0.1:3128: %q, want %q", got, want)
	}
}

// TestNetworkBoundary: only lo inside; the host's loopback is unreachable;
// the proxy and DNS sockets the parent holds are the ones the workload
// reaches at 127.0.0.1:3128 and :53; the sock_diag socket sees the
// sandbox's connections and Pids() finds their owner.
func TestNetworkBoundary(t *testing.T) {
	needSandbox(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hostConns := make(chan struct{}, 1)
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			c.Close()
			hostConns <- struct{}{}
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port

	spec := bashSpec(t, `
cat /proc/net/dev > /sandbox/netdev
ls /sys/class/net > /sandbox/sysnet
if (exec 3<>/dev/tcp/127.0.0.1/$HOSTPORT) 2>/dev/null; then echo reached; else echo blocked; fi > /sandbox/host
exec 3<>/dev/tcp/127.0.0.1/3128; read -r -n1 -u 3 b; echo "$b" > /sandbox/proxy; exec 3<&-
exec 4<>/dev/udp/127.0.0.1/53; printf q >&4; head -c1 <&4 > /sandbox/dnsudp; exec 4<&-
exec 5<>/dev/tcp/127.0.0.1/53; head -c1 <&5 > /sandbox/dnstcp; exec 5<&-
cat /etc/resolv.conf > /sandbox/resolv
echo "$HTTP_PROXY $HTTPS_PROXY $NO_PROXY" > /sandbox/proxyenv
hostname > /sandbox/hostname
`)
	spec.Env = []string{"HOSTPORT=" + strconv.Itoa(hostPort), "HTTP_PROXY=http://elsewhere:1"}
	spec.Filesystem.ReadOnly = append(spec.Filesystem.ReadOnly, "/proc", "/sys", "/etc")
	sb := start(t, spec)
	proxy, dnsUDP, dnsTCP, _ := sb.Listeners()
	resolver, err := identity.NewNetlink(identity.WithDiagFD(mustDup(t, sb)), identity.WithPids(sb.Pids))
	if err != nil {
		t.Fatal(err)
	}
	defer resolver.Close()

	deadline := time.Now().Add(10 * time.Second)
	c, err := acceptBy(proxy, deadline)
	if err != nil {
		t.Fatalf("proxy accept: %v", err)
	}
	// As root (needSandbox) the parent makes the proxy listener itself,
	// keep-alive off (init's, adopted through a descriptor, would turn it
	// on).
	if keepAliveOn(t, c) {
		t.Fatal("a proxy connection accepted with SO_KEEPALIVE on; the root parent's listener has it off")
	}
	// The client (the workload, bash, the socket's only holder) blocks
	// reading until the byte comes: its socket is there to be identified.
	id, err := resolver.Resolve(context.Background(),
		c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort())
	if err != nil {
		t.Fatalf("identity of the proxy client: %v", err)
	}
	pids, err := sb.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if id.Pid != sb.WorkloadPid() || id.Exe != "/usr/bin/bash" || !slices.Contains(pids, id.Pid) {
		t.Fatalf("proxy client identified as pid %d %s; want the workload %d /usr/bin/bash among %v", id.Pid, id.Exe, sb.WorkloadPid(), pids)
	}
	// The same through the sandbox's own /proc, numbered inside.
	inside, err := identity.NewNetlink(identity.WithDiagFD(mustDup(t, sb)), identity.WithProcRoot(sb.ProcRoot()))
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	id2, err := inside.Resolve(context.Background(),
		c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort())
	if err != nil || id2.Exe != id.Exe || hostPid(sb.pidNS, id2.Pid) != id.Pid {
		t.Fatalf("identity through ProcRoot: %+v, %v; want %s, host pid %d", id2, err, id.Exe, id.Pid)
	}
	mustWrite(t, c, "P")

	dnsUDP.SetDeadline(deadline)
	buf := make([]byte, 16)
	n, from, err := dnsUDP.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "q" {
		t.Fatalf("dns udp read %q, %v", buf[:n], err)
	}
	if _, err := dnsUDP.WriteTo([]byte("D"), from); err != nil {
		t.Fatal(err)
	}
	c, err = acceptBy(dnsTCP, deadline)
	if err != nil {
		t.Fatalf("dns tcp accept: %v", err)
	}
	mustWrite(t, c, "T")

	if st := wait(t, sb); !st.Success() {
		t.Fatalf("workload: %s", st)
	}
	for file, want := range map[string]string{
		"host":     "blocked",
		"proxy":    "P",
		"dnsudp":   "D",
		"dnstcp":   "T",
		"resolv":   "nameserver 127.0.0.1",
		"proxyenv": ProxyURL + " " + ProxyURL + " localhost,127.0.0.1",
		"hostname": DefaultHostname,
		"sysnet":   "lo",
	} {
		if got := readWS(t, spec, file); !strings.HasSuffix(got, want) {
			t.Errorf("%s: %q, want it to end in %q", file, got, want)
		}
	}
	var links []string
	for _, line := range strings.Split(readWS(t, spec, "netdev"), "\n")[2:] {
		name, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		links = append(links, name)
	}
	if !slices.Equal(links, []string{"lo"}) {
		t.Errorf("links inside: %v, want [lo]", links)
	}
	select {
	case <-hostConns:
		t.Error("the host's loopback listener got a connection from the sandbox")
	default:
	}
}

func mustDup(t *testing.T, sb *Sandbox) int {
	t.Helper()
	fd, err := sb.DupDiagFD()
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func acceptBy(l net.Listener, deadline time.Time) (net.Conn, error) {
	l.(interface{ SetDeadline(time.Time) error }).SetDeadline(deadline)
	c, err := l.Accept()
	if err == nil {
		c.SetDeadline(deadline)
	}
	return c, err
}

func mustWrite(t *testing.T, c net.Conn, s string) {
	t.Helper()
	defer c.Close()
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

// TestCredentials: the workload's uid on the host is in the mapped range,
// with no capability that could undo the sandbox; Pids covers init and the
// workload only.
func TestCredentials(t *testing.T) {
	needSandbox(t)
	const sysAdmin = 1 << 21 // CAP_SYS_ADMIN
	for _, tc := range []struct {
		uid, gid uint32
		capEff   uint64
	}{
		{0, 0, keptCaps},
		{1000, 1001, 0},
	} {
		t.Run(fmt.Sprintf("uid%d", tc.uid), func(t *testing.T) {
			spec := bashSpec(t, "echo > /sandbox/made; exec cat")
			spec.RunAsUser, spec.RunAsGroup = tc.uid, tc.gid
			stdin, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			spec.Stdin = stdin
			sb := start(t, spec)
			stdin.Close()
			pid := sb.WorkloadPid()
			testenv.Eventually(t, 5*time.Second, func() bool {
				exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
				return exe == "/usr/bin/cat"
			}, "workload pid %d never became cat", pid)
			hu, hg := testIDBase+tc.uid, testIDBase+tc.gid
			if got, want := procStatus(t, pid, "Uid"), strings.Repeat(fmt.Sprint(hu)+" ", 4); got+" " != want {
				t.Errorf("host Uid line %q, want %q", got, want)
			}
			if got, want := procStatus(t, pid, "Gid"), strings.Repeat(fmt.Sprint(hg)+" ", 4); got+" " != want {
				t.Errorf("host Gid line %q, want %q", got, want)
			}
			for field, want := range map[string]uint64{"CapEff": tc.capEff, "CapBnd": keptCaps, "CapAmb": 0, "CapInh": 0, "SigIgn": 0, "SigBlk": 0} {
				got, err := strconv.ParseUint(procStatus(t, pid, field), 16, 64)
				if err != nil || got != want {
					t.Errorf("%s %#x, want %#x", field, got, want)
				}
				if got&sysAdmin != 0 {
					t.Errorf("%s has CAP_SYS_ADMIN", field)
				}
			}
			if got := procStatus(t, pid, "NoNewPrivs"); got != "1" {
				t.Errorf("NoNewPrivs %s", got)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(spec.Workspace, "made"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != hu || st.Gid != hg {
				t.Errorf("workspace file owned by %d:%d, want %d:%d", st.Uid, st.Gid, hu, hg)
			}
			pids, err := sb.Pids()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(pids)
			want := []int{sb.InitPid(), pid}
			slices.Sort(want)
			if !slices.Equal(pids, want) {
				t.Errorf("Pids() %v, want init and workload %v", pids, want)
			}
			w.Close()
			if st := wait(t, sb); !st.Success() {
				t.Fatalf("workload: %s", st)
			}
		})
	}
}

// TestLandlock: the same probes under a policy that allows them and one
// that does not, so a denial is Landlock's, not file permissions'.
func TestLandlock(t *testing.T) {
	needSandbox(t)
	if abi, err := landlockABI(); err != nil {
		testenv.Unavailable(t, "Landlock: %v", err)
	} else {
		t.Logf("Landlock ABI %d", abi)
	}
	const script = `
try() { if (eval "$2") 2>/dev/null; then echo "$1 allowed"; else echo "$1 denied"; fi; }
{
try write_tmp 'echo x > /tmp/x'
try read_etc 'cat /etc/passwd > /dev/null'
try write_etc 'echo x > /etc/x'
try write_ws 'echo x > /sandbox/x'
try devnull 'echo x > /dev/null'
try devzero 'head -c1 /dev/zero > /dev/null'
try proc 'cat /proc/self/status > /dev/null'
} > /sandbox/results`
	probe := func(fs Filesystem) map[string]string {
		spec := bashSpec(t, script)
		spec.Filesystem = fs
		sb := run(t, spec)
		if sb.LandlockABI() == 0 {
			t.Fatalf("no Landlock ABI reported; warnings %q", sb.Warnings())
		}
		got := map[string]string{}
		for _, line := range strings.Split(readWS(t, spec, "results"), "\n") {
			k, v, _ := strings.Cut(line, " ")
			got[k] = v
		}
		return got
	}
	strict := probe(Filesystem{ReadOnly: baseReadOnly(), ReadWrite: []string{WorkspaceMount}, Mode: HardRequirement})
	open := probe(Filesystem{ReadOnly: append(baseReadOnly(), "/etc", "/proc"), ReadWrite: []string{WorkspaceMount, "/tmp"}, Mode: HardRequirement})
	for probe, want := range map[string][2]string{
		"write_tmp": {"denied", "allowed"},
		"read_etc":  {"denied", "allowed"},
		"write_etc": {"denied", "denied"}, // host root's /etc: file permissions too
		"write_ws":  {"allowed", "allowed"},
		"devnull":   {"allowed", "allowed"},
		"devzero":   {"allowed", "allowed"},
		"proc":      {"denied", "allowed"},
	} {
		if strict[probe] != want[0] || open[probe] != want[1] {
			t.Errorf("%s: strict policy %s, open policy %s; want %s and %s", probe, strict[probe], open[probe], want[0], want[1])
		}
	}
}

func TestFilesystemModes(t *testing.T) {
	needSandbox(t)
	const missing = "/nonexistent-nsrun-path"
	spec := bashSpec(t, "true")
	spec.Filesystem.ReadOnly = append(spec.Filesystem.ReadOnly, missing)
	spec.Filesystem.Mode = BestEffort
	sb := run(t, spec)
	if w := sb.Warnings(); len(w) != 1 || !strings.Contains(w[0], "read_only "+missing) || !strings.Contains(w[0], "no such file") {
		t.Errorf("best_effort warnings %q, want one naming %s and the cause", w, missing)
	}

	spec.Filesystem.Mode = HardRequirement
	_, err := Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "read_only "+missing) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("hard_requirement Start error %v, want one naming %s and the cause", err, missing)
	}
}

func TestStartFailures(t *testing.T) {
	needSandbox(t)
	for _, tc := range []struct {
		name    string
		argv    []string
		workdir string
		fs      Filesystem
		want    string
	}{
		{"not in PATH", []string{"nsrun-no-such-command"}, "", Filesystem{ReadOnly: baseReadOnly()}, "not found in PATH"},
		{"missing binary", []string{"/nsrun/no/such/binary"}, "", Filesystem{ReadOnly: baseReadOnly()},
			"the command /nsrun/no/such/binary does not exist in the sandbox: check the path (the sandbox sees /bin, "},
		{"not executable under Landlock", []string{"/bin/true"}, "", Filesystem{},
			"execve /bin/true: permission denied: the policy's filesystem_policy does not allow executing it (list /bin"},
		{"not a program", []string{"/etc/hostname"}, "", Filesystem{ReadOnly: baseReadOnly()}, "execve /etc/hostname: permission denied"},
		{"missing workdir", []string{"/bin/true"}, "/sandbox/no/such/dir", Filesystem{ReadOnly: baseReadOnly()}, "workdir /sandbox/no/such/dir: no such file"},
		{"hard_requirement path", []string{"/bin/true"}, "", Filesystem{ReadOnly: append(baseReadOnly(), "/nsrun-no-such-path"), Mode: HardRequirement},
			"read_only /nsrun-no-such-path: open: no such file or directory (hard_requirement): the path does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(context.Background(), Spec{Argv: tc.argv, Workdir: tc.workdir, Workspace: t.TempDir(), Filesystem: tc.fs, HostIDBase: testIDBase})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start error %v, want %q", err, tc.want)
			}
			if !errors.Is(err, ErrCannotStart) {
				t.Fatalf("Start error %v is not ErrCannotStart: it would be retried", err)
			}
		})
	}
	t.Run("baseline only", func(t *testing.T) {
		// No filesystem_policy: the baseline alone runs a shell, and a
		// missing baseline path is skipped silently even in
		// hard_requirement mode.
		out := filepath.Join(t.TempDir(), "out")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "echo ok; echo x > /tmp/w && cat /tmp/w"}, Workspace: t.TempDir(), Stdout: f, HostIDBase: testIDBase,
			Filesystem: Filesystem{Mode: HardRequirement,
				BaselineReadOnly:  []string{"/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/nsrun-missing-baseline"},
				BaselineReadWrite: []string{"/tmp", WorkspaceMount}}})
		if err != nil {
			t.Fatalf("Start with the baseline only: %v", err)
		}
		defer sb.Close()
		if st, err := sb.Wait(); err != nil || !st.Success() {
			t.Fatalf("workload: %v %v", st, err)
		}
		if b, _ := os.ReadFile(out); string(b) != "ok\nx\n" {
			t.Fatalf("workload output %q, want ok and x", b)
		}
		if w := sb.Warnings(); len(w) != 0 {
			t.Errorf("warnings %q, want none (a missing baseline path is skipped silently)", w)
		}
	})
	t.Run("a transient failure is not permanent", func(t *testing.T) {
		spec := bashSpec(t, "true")
		spec.Executable = "/bin/true"
		if _, err := Start(context.Background(), spec); err == nil || errors.Is(err, ErrCannotStart) {
			t.Fatalf("Start error %v: init dying is not ErrCannotStart", err)
		}
	})
	t.Run("init dies", func(t *testing.T) {
		spec := bashSpec(t, "true")
		spec.Executable = "/bin/true" // no stage to run: exits at once
		if _, err := Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), "before reporting") {
			t.Fatalf("Start error %v, want init gone before reporting", err)
		}
	})
	t.Run("init never answers", func(t *testing.T) {
		stdin, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		defer stdin.Close()
		spec := bashSpec(t, "true")
		spec.Executable, spec.Stdin = "/bin/cat", stdin // blocks reading stdin
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		began := time.Now()
		if _, err := Start(ctx, spec); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Start error %v, want the context's deadline", err)
		}
		if d := time.Since(began); d > 2*time.Second {
			t.Fatalf("Start took %s to give up", d)
		}
	})
}

// TestPrivateMounts: /tmp, /var/tmp, /dev/shm and /run are the sandbox's
// own; Hidden directories are empty inside; a symlinked resolv.conf is
// covered without touching its target.
func TestPrivateMounts(t *testing.T) {
	needSandbox(t)
	name := fmt.Sprintf("nsrun-test-%d", time.Now().UnixNano())
	hostFile := filepath.Join("/tmp", name+"-host")
	if err := os.WriteFile(hostFile, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(hostFile)
	spec := bashSpec(t, fmt.Sprintf(`
for d in /tmp /var/tmp /dev/shm /run; do echo $d > $d/%[1]s && cat $d/%[1]s; done > /sandbox/written
if [ -e %[2]s ]; then echo visible; else echo invisible; fi > /sandbox/hostfile
ls -A /sandbox/secret > /sandbox/secret-listing
cat /sandbox/resolv-link > /sandbox/resolv
`, name, hostFile))
	spec.Filesystem.ReadWrite = append(spec.Filesystem.ReadWrite, "/tmp", "/var/tmp", "/dev/shm", "/run")
	spec.Hidden = []string{"/sandbox/secret", "/nonexistent-nsrun-hidden"}
	spec.ResolvConf = "/sandbox/resolv-link"
	if err := os.Mkdir(filepath.Join(spec.Workspace, "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spec.Workspace, "secret", "token"), []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(spec.Workspace, "resolv-link")
	if err := os.Symlink("/nonexistent-nsrun/stub-resolv.conf", link); err != nil {
		t.Fatal(err)
	}
	sb := run(t, spec)
	t.Logf("warnings: %q", sb.Warnings())
	if got := readWS(t, spec, "written"); got != "/tmp\n/var/tmp\n/dev/shm\n/run" {
		t.Errorf("files written and read back inside: %q", got)
	}
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm", "/run"} {
		if _, err := os.Stat(filepath.Join(d, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/%s written inside exists on the host (%v)", d, name, err)
		}
	}
	if got := readWS(t, spec, "hostfile"); got != "invisible" {
		t.Errorf("host /tmp file is %s inside", got)
	}
	if got := readWS(t, spec, "secret-listing"); got != "" {
		t.Errorf("hidden directory lists %q inside", got)
	}
	if got := readWS(t, spec, "resolv"); !strings.HasSuffix(got, "nameserver 127.0.0.1") {
		t.Errorf("resolv.conf through the symlink: %q", got)
	}
	if target, err := os.Readlink(link); err != nil || target != "/nonexistent-nsrun/stub-resolv.conf" {
		t.Errorf("host symlink changed: %q %v", target, err)
	}
}

// TestDeathWithSupervisor: SIGKILL the supervisor process; the orphan that
// cleared its parent-death signal dies with the pid namespace.
func TestDeathWithSupervisor(t *testing.T) {
	needSandbox(t)
	testenv.NeedTool(t, "setpriv", "util-linux")
	helper, r := runHelper(t, helperSupervisor, t.TempDir(), nil)
	if r.Error != "" {
		t.Fatalf("helper: %s", r.Error)
	}
	if ppid := procStatus(t, r.OrphanPid, "PPid"); ppid != strconv.Itoa(r.InitPid) {
		t.Fatalf("orphan %d has parent %s, want init %d (not reparented)", r.OrphanPid, ppid, r.InitPid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return pidGone(r.OrphanPid) && pidGone(r.InitPid) },
		"orphan %d / init %d still alive after the supervisor died", r.OrphanPid, r.InitPid)
}

// TestCloseKillsOrphans: Close alone (no SIGKILL fallback) ends an orphan.
func TestCloseKillsOrphans(t *testing.T) {
	needSandbox(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sb := start(t, bashSpec(t, "(sleep 1000 &); echo > /sandbox/done"))
	if st := wait(t, sb); !st.Success() {
		t.Fatalf("workload: %s", st)
	}
	pids, err := sb.Pids()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 2 {
		t.Fatalf("pids after the workload exited: %v, want init and the orphan", pids)
	}
	start := time.Now()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !pidGone(pid) {
			t.Errorf("pid %d alive after Close", pid)
		}
	}
	t.Logf("Close took %s", time.Since(start))
}

// TestUnprivileged: run by an unprivileged user, the sandbox maps only that
// user (as uid 1000 inside) and still works.
func TestUnprivileged(t *testing.T) {
	needSandbox(t)
	const nobody = 65534
	ws := t.TempDir()
	if err := os.Chown(ws, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	// The workspace's ancestors must be searchable by the user.
	for d := ws; d != "/tmp"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	_, r := runHelper(t, helperUnprivileged, ws, &syscall.Credential{Uid: nobody, Gid: nobody, NoSetGroups: true})
	if r.Error != "" {
		if strings.Contains(r.Error, "start init") && strings.Contains(r.Error, "user namespaces") {
			testenv.Unavailable(t, "%s", r.Error)
		}
		t.Fatalf("helper: %s", r.Error)
	}
	if !r.Status.Success() || !r.HaveSockets || r.ExecOut != "1000 host-pid" {
		t.Fatalf("helper report %+v", r)
	}
	// Init, unprivileged (no cgroup: its work is the user's), passed on
	// the output within the line rate: the burst of 5 and the count of
	// the rest (a second at 10 lines a second at most refilled meanwhile).
	if len(r.Output) < 6 || strings.Join(r.Output[:4], "|") != "out from 1000|1|2|3" || r.Output[len(r.Output)-2] != "err from 1000" {
		t.Errorf("output passed on by an unprivileged init: %q", r.Output)
	} else if kept := len(r.Output) - 1; !strings.HasPrefix(r.Output[len(r.Output)-1], fmt.Sprintf("dropped %d ", 1002-kept)) {
		t.Errorf("output: %d lines kept of 1002, %q", kept, r.Output[len(r.Output)-1])
	}
	// Init (uid 1000 inside) set its namespace's inotify limit: no
	// sandbox takes more than half of the gateway user's share.
	if got, want := readWS(t, Spec{Workspace: ws}, "inotify"), fmt.Sprint(hostInotifyShare().Instances); got != want || len(r.Warnings) != 0 {
		t.Errorf("inotify instances inside %q (warnings %q), want %s", got, r.Warnings, want)
	}
	spec := Spec{Workspace: ws}
	for file, want := range map[string]string{"uid": "1000", "gid": "1000", "capeff": "CapEff:\t0000000000000000"} {
		if got := readWS(t, spec, file); got != want {
			t.Errorf("%s %q, want %q", file, got, want)
		}
	}
	if got := strings.Fields(readWS(t, spec, "uid_map")); !slices.Equal(got, []string{"1000", strconv.Itoa(nobody), "1"}) {
		t.Errorf("uid_map %q, want 1000 -> %d, size 1", got, nobody)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "made"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != nobody {
		t.Errorf("workspace file owned by %d, want %d", st.Uid, nobody)
	}
}

func TestWorkloadEnv(t *testing.T) {
	got := workloadEnv([]string{"http_proxy=x", "PATH=/p", "A=1"}, "/w", nil)
	want := []string{"PATH=/p", "A=1", "HOME=/w",
		"HTTP_PROXY=" + ProxyURL, "HTTPS_PROXY=" + ProxyURL, "http_proxy=" + ProxyURL, "https_proxy=" + ProxyURL,
		"NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("workloadEnv = %q, want %q", got, want)
	}
	// A policy allowing 127.0.0.1: it goes through the proxy (audited);
	// localhost, not listed, stays direct.
	got = workloadEnv(nil, "/w", []string{"127.0.0.1"})
	if !slices.Contains(got, "NO_PROXY=localhost") || !slices.Contains(got, "no_proxy=localhost") {
		t.Fatalf("workloadEnv with 127.0.0.1 via the proxy = %q, want NO_PROXY=localhost", got)
	}
	got = workloadEnv(nil, "/w", []string{"127.0.0.1", "localhost"})
	if !slices.Contains(got, "NO_PROXY=") || !slices.Contains(got, "no_proxy=") {
		t.Fatalf("workloadEnv with both via the proxy = %q, want an empty NO_PROXY", got)
	}
}

func TestEnumStrings(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		BestEffort: "best_effort", HardRequirement: "hard_requirement", Mode(9): "Mode(9)",
		msgConfig: "config", msgExited: "exited", msgExec: "exec", msgExecStarted: "exec-started", msgSignal: "signal", msgKind(0): "msgKind(0)",
		ExitStatus{Code: 3}: "exit 3", ExitStatus{Code: -1, Signal: syscall.SIGKILL}: "signal killed",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}

func BenchmarkPids(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ws := b.TempDir()
	stdin, w, _ := os.Pipe()
	defer w.Close()
	sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/cat"}, Workspace: ws, Stdin: stdin, HostIDBase: testIDBase,
		Filesystem: Filesystem{ReadOnly: baseReadOnly()}})
	stdin.Close()
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	for b.Loop() {
		if _, err := sb.Pids(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProcRootList(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	ws := b.TempDir()
	stdin, w, _ := os.Pipe()
	defer w.Close()
	sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/cat"}, Workspace: ws, Stdin: stdin, HostIDBase: testIDBase,
		Filesystem: Filesystem{ReadOnly: baseReadOnly()}})
	stdin.Close()
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	root := sb.ProcRoot()
	for b.Loop() {
		d, err := os.Open(root)
		if err != nil {
			b.Fatal(err)
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		if len(names) == 0 {
			b.Fatal("empty")
		}
	}
}

// keepAliveOn reports whether c (TCP) has SO_KEEPALIVE set.
func keepAliveOn(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	cerr := rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) })
	if cerr != nil || err != nil {
		t.Fatalf("SO_KEEPALIVE: %v %v", cerr, err)
	}
	return v != 0
}
