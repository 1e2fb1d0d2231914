package boundary_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/audit"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/policy/reason"
)

// scripted wraps the netlink resolver: it says when each lookup has run,
// records the order of the boundary's calls, and answers what the test
// scripts instead of the resolver where set.
type scripted struct {
	*identity.Netlink
	looked chan struct{} // a value after each lookup (dropped when full)

	mu        sync.Mutex
	calls     []string
	atAccept  error               // the lookup's error
	recheck   error               // Recheck's answer
	tampered  *identity.Tampering // Tampered's answer
	tamperErr error
}

func newScripted() *scripted { return &scripted{looked: make(chan struct{}, 1)} }

func (s *scripted) wrap(r identity.Resolver) identity.Resolver {
	s.Netlink = r.(*identity.Netlink)
	return s
}

func (s *scripted) call(name string) {
	s.mu.Lock()
	s.calls = append(s.calls, name)
	s.mu.Unlock()
}

func (s *scripted) called() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *scripted) ResolveMarked(ctx context.Context, m identity.Mark, local, remote netip.AddrPort) (identity.Identity, error) {
	id, err := s.Netlink.ResolveMarked(ctx, m, local, remote)
	s.call("resolve")
	s.mu.Lock()
	if s.atAccept != nil {
		id, err = identity.Identity{}, s.atAccept
	}
	s.mu.Unlock()
	select {
	case s.looked <- struct{}{}:
	default:
	}
	return id, err
}

func (s *scripted) Recheck(ctx context.Context, id identity.Identity) error {
	s.call("recheck")
	s.mu.Lock()
	err := s.recheck
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Netlink.Recheck(ctx, id)
}

func (s *scripted) Tampered(id identity.Identity) (*identity.Tampering, error) {
	s.call("tampered")
	s.mu.Lock()
	t, err := s.tampered, s.tamperErr
	s.mu.Unlock()
	if t != nil || err != nil {
		return t, err
	}
	return s.Netlink.Tampered(id)
}

// waitLookup waits for the next lookup the scripted resolver runs.
func (s *scripted) waitLookup(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.looked:
	case <-time.After(10 * time.Second):
		t.Fatalf("no identity lookup within 10 s %s (calls %v)", what, s.called())
	}
}

// lastEvent waits for a network decision with code and returns the last.
func (e *env) lastEvent(t *testing.T, code reason.Code) audit.Event {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool { return e.audit.count(audit.ClassNetwork, code) > 0 }, "a %s decision audited", code)
	e.audit.mu.Lock()
	defer e.audit.mu.Unlock()
	for i := len(e.audit.events) - 1; ; i-- {
		if ev := e.audit.events[i]; ev.ClassUID == audit.ClassNetwork && ev.Reason == code {
			return ev
		}
	}
}

// TestIdentityTakenAtAccept: the boundary identifies a connection's client
// before reading its request (here the client sends nothing until the
// lookup has run), confirms that identity once the request is complete,
// and asks whether the client's processes are tampered only then.
func TestIdentityTakenAtAccept(t *testing.T) {
	s := newScripted()
	e := startEnv(t, envOpts{wrap: s.wrap})
	c, err := net.DialTimeout("tcp", e.proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.waitLookup(t, "of a connection that has sent no request yet")
	code, body, tunnel := connectOn(t, c, "up.test", e.echoPort)
	if code != 200 {
		t.Fatalf("CONNECT: %d %s", code, body)
	}
	_ = tunnel.Close()
	if got := s.called(); !slices.Equal(got, []string{"resolve", "recheck", "tampered"}) {
		t.Fatalf("calls %v, want the lookup at accept, the recheck, then the tamper check", got)
	}
}

// TestBinaryChanged: a connection whose identity changed, found at the
// accept (the process executed another program since its connect) or
// when the request is complete (since the accept), is denied
// binary_changed: 403 with the reason and what changed, audited with the
// process as it is now, and the upstream never sees a connection.
func TestBinaryChanged(t *testing.T) {
	for _, at := range []string{"accept", "request's end"} {
		t.Run(at, func(t *testing.T) {
			s := newScripted()
			e := startEnv(t, envOpts{wrap: s.wrap})
			now := identity.Identity{Pid: 4242, Exe: "/usr/bin/curl", Ancestors: []string{"/usr/bin/bash"}}
			ch := &identity.ChangedError{Now: now, Msg: "pid 4242 was /usr/bin/bash when the connection was accepted and executed /usr/bin/curl"}
			s.mu.Lock()
			if at == "accept" {
				s.atAccept = fmt.Errorf("identity: lookup: %w", ch)
			} else {
				s.recheck = ch
			}
			s.mu.Unlock()
			code, body, _ := e.connect(t, "up.test", e.echoPort)
			if code != 403 || !strings.Contains(body, `"reason":"binary_changed"`) || !strings.Contains(body, "executed /usr/bin/curl") {
				t.Fatalf("changed at %s: %d %s, want 403 binary_changed saying what changed", at, code, body)
			}
			ev := e.lastEvent(t, reason.BinaryChanged)
			if ev.ActionID != audit.ActionDenied || ev.Actor == nil || ev.Actor.Path != "/usr/bin/curl" || ev.Actor.Pid != 4242 ||
				ev.Dst == nil || ev.Dst.Hostname != "up.test" || !strings.Contains(ev.Message, "was /usr/bin/bash") {
				t.Fatalf("audited %+v (actor %+v), want the denial naming /usr/bin/curl (pid 4242) and what it was", ev, ev.Actor)
			}
			if n := e.echoConns.Load(); n != 0 {
				t.Fatalf("the upstream accepted %d connections, want none", n)
			}
			if got := s.called(); slices.Contains(got, "tampered") {
				t.Fatalf("calls %v: the tamper check ran for a changed identity", got)
			}
		})
	}
}

// TestBinaryTampered: a binary the policy allows, whose process the
// resolver finds tampered, is denied binary_tampered (403 naming why,
// audited with the allowing policy), and the upstream never sees a
// connection; a failed check is identity_unavailable. A destination the
// policy denies anyway is never inspected.
func TestBinaryTampered(t *testing.T) {
	s := newScripted()
	e := startEnv(t, envOpts{wrap: s.wrap})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self, _ = filepath.EvalSymlinks(self)
	why := "maps executable code from /sandbox/libevil.so, a path the workload can write"
	s.mu.Lock()
	s.tampered = &identity.Tampering{Pid: os.Getpid(), Exe: self, Why: why}
	s.mu.Unlock()
	code, body, _ := e.connect(t, "up.test", e.echoPort)
	if code != 403 || !strings.Contains(body, `"reason":"binary_tampered"`) || !strings.Contains(body, "/sandbox/libevil.so") {
		t.Fatalf("tampered: %d %s, want 403 binary_tampered naming the library", code, body)
	}
	ev := e.lastEvent(t, reason.BinaryTampered)
	if ev.Actor == nil || ev.Actor.Path != self || ev.Actor.Pid != os.Getpid() || ev.Policy.Name != "tests" || !strings.Contains(ev.Message, why) {
		t.Fatalf("audited %+v (actor %+v, policy %+v), want this process, the policy tests and why", ev, ev.Actor, ev.Policy)
	}
	if n := e.echoConns.Load(); n != 0 {
		t.Fatalf("the upstream accepted %d connections, want none", n)
	}

	s.mu.Lock()
	s.tampered, s.tamperErr, s.calls = nil, fmt.Errorf("identity: inspect pid 1: gone"), nil
	s.mu.Unlock()
	if code, body, _ := e.connect(t, "up.test", e.echoPort); code != 403 || !strings.Contains(body, `"reason":"identity_unavailable"`) {
		t.Fatalf("a failed check: %d %s, want 403 identity_unavailable", code, body)
	}
	s.mu.Lock()
	s.tamperErr, s.calls = nil, nil
	s.mu.Unlock()
	if code, body, _ := e.connect(t, "denied.test", e.echoPort); code != 403 || !strings.Contains(body, "endpoint_not_allowed") {
		t.Fatalf("denied.test: %d %s", code, body)
	}
	if got := s.called(); slices.Contains(got, "tampered") {
		t.Fatalf("calls %v: a denied destination was inspected", got)
	}
}

// TestPartialRequestThenExec plays the attack with real processes: bash
// connects to the proxy and writes a CONNECT for an endpoint only curl
// may reach, without its final CRLF; once the boundary has looked the
// connection up, bash executes curl on the same socket, which writes the
// CRLF that completes the request (and then reads its stdin, the test's
// pipe, so it is still curl when the boundary looks again). The binary that wrote the request is
// bash: denied binary_changed, audited naming curl and bash, and the
// upstream never sees a connection.
func TestPartialRequestThenExec(t *testing.T) {
	bash, curl := realTool(t, "bash"), realTool(t, "curl")
	if curl != "/usr/bin/curl" {
		testenv.Unavailable(t, "curl at %s, not the /usr/bin/curl the test policy allows", curl)
	}
	s := newScripted()
	e := startEnv(t, envOpts{wrap: s.wrap})
	crlf := filepath.Join(t.TempDir(), "crlf")
	if err := os.WriteFile(crlf, []byte("\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, proxyPort, _ := net.SplitHostPort(e.proxy)
	script := `exec 3<>/dev/tcp/127.0.0.1/$0
printf 'CONNECT up.test:%s HTTP/1.1\r\nHost: up.test:%s\r\n' "$1" "$1" >&3
read -r _
exec "$2" -s "file://$3" --next -s -o /dev/null file:///dev/stdin >&3`
	cmd := exec.Command(bash, "-c", script, proxyPort, strconv.Itoa(e.echoPort), curl, crlf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	s.waitLookup(t, "of bash's connection")
	_, _ = io.WriteString(stdin, "go\n")
	ev := e.lastEvent(t, reason.BinaryChanged)
	if ev.Actor == nil || ev.Actor.Path != curl || ev.Actor.Pid != cmd.Process.Pid || !strings.Contains(ev.Message, bash) || ev.Dst == nil || ev.Dst.Hostname != "up.test" {
		t.Fatalf("audited %+v (actor %+v), want binary_changed naming %s (pid %d) and %s", ev, ev.Actor, curl, cmd.Process.Pid, bash)
	}
	if n := e.echoConns.Load(); n != 0 {
		t.Fatalf("the upstream accepted %d connections, want none", n)
	}
	if n := e.audit.count(audit.ClassNetwork, reason.None); n != 0 {
		t.Fatalf("%d connections allowed, want none", n)
	}
}

// TestPreloadedCurlTampered plays a workload that preloads a library of
// its own (built here with gcc, in a directory the tamper policy says the
// workload can write) into curl, which the policy allows: its CONNECT is
// denied binary_tampered, audited naming curl and the library, and the
// upstream never sees a connection; the same curl without the library
// gets its tunnel.
func TestPreloadedCurlTampered(t *testing.T) {
	curl := realTool(t, "curl")
	if curl != "/usr/bin/curl" {
		testenv.Unavailable(t, "curl at %s, not the /usr/bin/curl the test policy allows", curl)
	}
	dir := t.TempDir()
	lib := testenv.PreloadLib(t, dir)
	e := startEnv(t, envOpts{idOpts: []identity.Option{identity.WithTamperCheck(identity.TamperPolicy{
		ReadOnly: []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"}, Writable: []string{dir}})}})
	run := func(env ...string) string {
		c := exec.Command(curl, "-s", "-m", "5", "-p", "-x", "http://"+e.proxy, "-o", "/dev/null", "-w", "%{http_connect}",
			"http://up.test:"+strconv.Itoa(e.echoPort)+"/")
		c.Env = append(os.Environ(), env...)
		out, _ := c.Output()
		return string(out)
	}
	if got := run("LD_PRELOAD=" + lib); got != "403" {
		t.Fatalf("curl with %s preloaded: CONNECT answered %q, want 403", lib, got)
	}
	ev := e.lastEvent(t, reason.BinaryTampered)
	if ev.Actor == nil || ev.Actor.Path != curl || !strings.Contains(ev.Message, lib) || ev.Policy.Name != "tests" {
		t.Fatalf("audited %+v (actor %+v), want binary_tampered naming %s and %s", ev, ev.Actor, curl, lib)
	}
	if n := e.echoConns.Load(); n != 0 {
		t.Fatalf("the upstream accepted %d connections, want none", n)
	}
	if got := run(); got != "200" {
		t.Fatalf("curl without the library: CONNECT answered %q, want 200", got)
	}
	testenv.Eventually(t, 5*time.Second, func() bool { return e.echoConns.Load() == 1 }, "the clean curl's tunnel to reach the upstream")
}

// realTool returns the real path of an installed program (the Debian
// package of the same name).
func realTool(t *testing.T, name string) string {
	t.Helper()
	p, _ := filepath.EvalSymlinks(testenv.NeedTool(t, name, name))
	return p
}
