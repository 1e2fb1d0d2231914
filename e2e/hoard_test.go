package e2e

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// Environment of TestHalfOpenHoardsLeaveTheAdmin's attacker processes,
// children of this test binary (hoardChild).
const (
	hoardModeEnv   = "STOCKADE_E2E_HOARD"        // hoardViewer or hoardSilent
	hoardTargetEnv = "STOCKADE_E2E_HOARD_TARGET" // host:port
	hoardCountEnv  = "STOCKADE_E2E_HOARD_COUNT"  // connections to hold
	hoardUIDEnv    = "STOCKADE_E2E_HOARD_UID"    // the user it becomes
	hoardConfigEnv = "STOCKADE_E2E_HOARD_CONFIG" // hoardViewer: the client bundle, read before it drops root
)

// The attackers' modes.
const (
	hoardViewer = "viewer" // authenticated connections that idle
	hoardSilent = "silent" // connections that never send a byte
)

// The attack of TestHalfOpenHoardsLeaveTheAdmin.
const (
	hoardSlots     = 400   // the viewer's connections (it gets ClientConns of them)
	silentUsers    = 17    // local users ...
	silentPerUser  = 64    // ... holding this many silent sockets each (the per-source cap)
	silentFirstUID = 61000 // the first of those users
)

// TestHalfOpenHoardsLeaveTheAdmin: a viewer, as local user 65534, holds
// as many authenticated connections to the gateway as it can (400 tried,
// half idle after the HTTP/2 preface, half with a quiet stream open,
// each reopened when the gateway closes it); then 17 local users hold 64
// silent sockets each (1,088: over the cap of 1,024 connections in their
// handshake, reopened as the handshake timeout closes them). The gateway
// holds at most the viewer's cap of its connections (256), refusing the
// rest (identity_conns), and all along the admin's `sandbox list` and
// `sandbox exec` (root's) work, while the local users are refused
// (pending_total). After `client revoke` of the viewer, and of an
// operator whose `exec` is running, the viewer's connections are closed
// within seconds (the gateway's descriptors fall back to where they were)
// and the operator's exec ends (its relay closed).
func TestHalfOpenHoardsLeaveTheAdmin(t *testing.T) {
	w := newWorld(t, 0)
	w.create("busy", `exec sleep 1000`)
	c := newClients(t, w)
	if code, out, errOut := c.issue("", "vic", "--role", "viewer"); code != 0 {
		t.Fatalf("issue vic: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := c.issue("", "opr", "--role", "operator", "--sandbox", "busy"); code != 0 {
		t.Fatalf("issue opr: exit %d\n%s%s", code, out, errOut)
	}
	gw := w.gw.Process.Pid

	// The operator's exec, over a relay, runs until it is revoked.
	execCmd := exec.Command(bin, "sandbox", "exec", "busy", "--config", c.bundle("opr"), "--state-dir", c.empty, "--", "/bin/sh", "-c", "echo started; exec sleep 1000")
	execCmd.Env = append(os.Environ(), "STOCKADE_CONFIG=", "STOCKADE_GATEWAY=")
	execOut, err := execCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	execCmd.Stderr = os.Stderr
	if err := execCmd.Start(); err != nil {
		t.Fatal(err)
	}
	execDone := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(execOut)
		for sc.Scan() {
			if sc.Text() == "started" {
				close(started)
			}
		}
		execDone <- execCmd.Wait()
	}()
	defer func() {
		_ = execCmd.Process.Kill()
		<-execDone
	}()
	select {
	case <-started:
	case err := <-execDone:
		t.Fatalf("the operator's exec ended before the attack: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the operator's exec did not start")
	}
	base := fdCount(gw)

	// The most descriptors the gateway holds, sampled all along a phase.
	fds := sampleFDs(t, gw)
	gwMax := fds.max(0)
	admin := func(when string, attackers ...*halfOpen) {
		t.Helper()
		var last strings.Builder
		for _, a := range attackers {
			last.WriteString(a.last())
		}
		for i := range 3 {
			if out, errOut, code := w.cli("list"); code != 0 || !strings.Contains(out, "busy") {
				t.Fatalf("admin's list %d %s: exit %d\n%s%s\nattackers: %s", i, when, code, out, errOut, last.String())
			}
		}
		if out, errOut, code := w.execIn("busy", "echo exec works"); code != 0 || !strings.Contains(out, "exec works") {
			t.Fatalf("admin's exec %s: exit %d\n%s%s\nattackers: %s", when, code, out, errOut, last.String())
		}
		t.Logf("%s: the admin's list and exec work; attackers: %s", when, last.String())
	}

	// The viewer hoards.
	viewer := &halfOpen{procs: []*attackerProc{startChild(t, "viewer", hoardModeEnv+"="+hoardViewer, hoardTargetEnv+"="+w.addr,
		hoardCountEnv+"="+strconv.Itoa(hoardSlots), hoardUIDEnv+"="+strconv.Itoa(nobody), hoardConfigEnv+"="+c.bundle("vic"))}}
	defer viewer.stop(t)
	if !viewer.waitOpened(hoardSlots, 2*time.Minute) {
		t.Fatalf("the viewer did not open its %d connections: %s", hoardSlots, viewer.last())
	}
	// (Not fatal: the descriptors it left the viewer are the test's
	// evidence then.)
	for deadline := time.Now().Add(20 * time.Second); metric(t, w.metrics, "stockade_remote_refused_total")[transport.ReasonIdentityConns] == 0; {
		if time.Now().After(deadline) {
			t.Errorf("the gateway refused none of the viewer's connections over its cap (%s) in 20 s: %s", transport.ReasonIdentityConns, viewer.last())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// What the gateway holds for the viewer: its cap of established
	// connections, and at most the per-source cap of new ones in their
	// handshake.
	bound := base + transport.DefaultClientConns + transport.DefaultPendingPerSource + 40
	gwMax.Store(0)
	admin("while the viewer hoards", viewer)
	if m := gwMax.Load(); m > int64(bound) {
		t.Errorf("while the viewer hoards the gateway held up to %d descriptors (%d before): want at most %d", m, base, bound)
	}
	held := fdCount(gw)
	if held < base+transport.DefaultClientConns/2 {
		t.Fatalf("the gateway holds %d descriptors (%d before): the viewer holds fewer connections than the test means", held, base)
	}
	t.Logf("the viewer hoards: the gateway holds %d descriptors (%d before, at most %d)", held, base, gwMax.Load())

	// 17 users hold 64 silent sockets each.
	silent := &halfOpen{}
	for i := range silentUsers {
		uid := silentFirstUID + i
		silent.procs = append(silent.procs, startChild(t, "uid "+strconv.Itoa(uid), hoardModeEnv+"="+hoardSilent, hoardTargetEnv+"="+w.addr,
			hoardCountEnv+"="+strconv.Itoa(silentPerUser), hoardUIDEnv+"="+strconv.Itoa(uid)))
	}
	defer silent.stop(t)
	if !silent.waitOpened(silentUsers*silentPerUser, 2*time.Minute) {
		t.Fatalf("the local users did not open their %d sockets: %s", silentUsers*silentPerUser, silent.last())
	}
	totalBefore := metric(t, w.metrics, "stockade_remote_refused_total")[transport.ReasonPendingTotal]
	testenv.Eventually(t, 20*time.Second, func() bool {
		return metric(t, w.metrics, "stockade_remote_refused_total")[transport.ReasonPendingTotal] > totalBefore
	}, "the local users to fill the cap of connections in their handshake (%s)", transport.ReasonPendingTotal)
	refused := metric(t, w.metrics, "stockade_remote_refused_total")
	admin("while 17 users fill the handshake cap and the viewer hoards", viewer, silent)
	after := metric(t, w.metrics, "stockade_remote_refused_total")
	if after[transport.ReasonPendingTotal] <= refused[transport.ReasonPendingTotal] {
		t.Errorf("the handshake cap was not full while the admin worked: %s %v then %v", transport.ReasonPendingTotal,
			refused[transport.ReasonPendingTotal], after[transport.ReasonPendingTotal])
	}
	t.Logf("refusals while the admin worked: %s %v -> %v, %s %v -> %v", transport.ReasonPendingTotal, refused[transport.ReasonPendingTotal],
		after[transport.ReasonPendingTotal], transport.ReasonIdentityConns, refused[transport.ReasonIdentityConns], after[transport.ReasonIdentityConns])
	// Again once the handshake timeout has closed each of their sockets
	// and they opened new ones: the pressure is kept up, not a burst.
	testenv.Eventually(t, 30*time.Second, func() bool { return silent.closedByServer() >= silentUsers*silentPerUser },
		"the local users' sockets to be closed at the handshake timeout and reopened: %s", silent.last())
	admin("once the users' sockets were closed at the handshake timeout and reopened", viewer, silent)
	silent.stop(t)
	fds.stop()

	// Revoke the viewer (which keeps reconnecting) and the operator.
	revokedAt := time.Now()
	for _, name := range []string{"vic", "opr"} {
		if out, errOut, code := c.as("", "client", "revoke", name); code != 0 {
			t.Fatalf("revoke %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	settled := base + transport.DefaultPendingPerSource + 40
	testenv.Eventually(t, 15*time.Second, func() bool { return fdCount(gw) <= settled },
		"the gateway to let the revoked viewer's connections go: %d descriptors, want at most %d (%d before the attack); viewer: %s",
		fdCount(gw), settled, base, viewer.last())
	t.Logf("%s after the revocation the gateway holds %d descriptors (%d before the attack, %d while the viewer hoarded); viewer: %s",
		time.Since(revokedAt).Round(100*time.Millisecond), fdCount(gw), base, held, viewer.last())
	// The viewer sees them closed; what it reopens is refused at its
	// handshake (a TLS 1.3 client finishes before the server has checked
	// its certificate: a few are open on its side for a moment).
	testenv.Eventually(t, 15*time.Second, func() bool { _, live, _ := viewer.procs[0].counts(); return live >= 0 && live <= 8 },
		"the viewer to hold none of its connections: %s", viewer.last())
	t.Logf("%s after the revocation the viewer says: %s", time.Since(revokedAt).Round(100*time.Millisecond), viewer.last())
	select {
	case err := <-execDone:
		execDone <- err
		t.Logf("the revoked operator's exec ended %s after the revocation: %v", time.Since(revokedAt).Round(100*time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked operator's exec still runs 15 s after the revocation")
	}
	if n := metric(t, w.metrics, "stockade_remote_refused_total")[transport.ReasonRevoked]; n < transport.DefaultClientConns/2 {
		t.Errorf("%s counted %v, want the viewer's connections and the operator's", transport.ReasonRevoked, n)
	}
	admin("after the revocations")
}

// hoardChild runs this process as one of TestHalfOpenHoardsLeaveTheAdmin's
// attackers when its environment says so (ok false: it is not one).
func hoardChild() (code int, ok bool) {
	mode := os.Getenv(hoardModeEnv)
	if mode == "" {
		return 0, false
	}
	target := os.Getenv(hoardTargetEnv)
	n, _ := strconv.Atoi(os.Getenv(hoardCountEnv))
	uid, err := strconv.Atoi(os.Getenv(hoardUIDEnv))
	if err != nil || n <= 0 || target == "" {
		fmt.Fprintf(os.Stderr, "hoard: bad environment: %s=%q %s=%q %s=%q\n", hoardTargetEnv, target,
			hoardCountEnv, os.Getenv(hoardCountEnv), hoardUIDEnv, os.Getenv(hoardUIDEnv))
		return 2, true
	}
	var conf *tls.Config
	if mode == hoardViewer {
		cf, err := trust.ReadClientConfig(os.Getenv(hoardConfigEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "hoard:", err)
			return 1, true
		}
		kp, err := trust.KeyPair([]byte(cf.Cert), []byte(cf.Key))
		if err != nil {
			fmt.Fprintln(os.Stderr, "hoard:", err)
			return 1, true
		}
		conf = transporttest.WithCert(kp)
	}
	if err := becomeUser(uid); err != nil {
		fmt.Fprintln(os.Stderr, "hoard:", err)
		return 1, true
	}
	switch mode {
	case hoardViewer:
		return hoard(n, func(i int) (hold func() error, err error) {
			if i%2 == 0 {
				return holdIdleConn(target, conf)
			}
			return holdStream(target, conf)
		}), true
	case hoardSilent:
		return hoard(n, func(int) (func() error, error) { return holdSilent(target) }), true
	}
	fmt.Fprintf(os.Stderr, "hoard: unknown mode %q\n", mode)
	return 2, true
}

// becomeUser drops root for uid (and gid uid).
func becomeUser(uid int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(uid); err != nil {
		return fmt.Errorf("setgid %d: %w", uid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid %d: %w", uid, err)
	}
	return nil
}

// hoard keeps n connections open: each slot opens one with open (the
// i-th slot's; hold blocks until the server ends it), holds it, and opens
// another (1 to 2 s later when the server ended it within a second, a
// refusal; else 100 ms). It reports its progress until its stdin closes.
func hoard(n int, open func(i int) (hold func() error, err error)) int {
	var h progress
	quit := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(quit)
	}()
	sem := make(chan struct{}, 32) // connects in flight
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
				sem <- struct{}{}
				hold, err := open(i)
				<-sem
				pause := time.Second + rand.N(time.Second) // spread: not every slot at once
				if err == nil {
					h.opened.Add(1)
					h.live.Add(1)
					start := time.Now()
					ended := make(chan struct{})
					go func() { _ = hold(); close(ended) }()
					select {
					case <-ended:
						h.closed.Add(1)
						if time.Since(start) > time.Second {
							pause = 100 * time.Millisecond
						}
					case <-quit:
					}
					h.live.Add(-1)
				}
				select {
				case <-quit:
					return
				case <-time.After(pause):
				}
			}
		}()
	}
	return h.report(quit, &wg)
}

// holdIdleConn opens an authenticated connection that sends the HTTP/2
// preface and nothing more, and never answers a frame.
func holdIdleConn(target string, conf *tls.Config) (func() error, error) {
	c, err := transporttest.HoldIdle(-1, target, conf, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return func() error {
		defer c.Close()
		_, err := io.Copy(io.Discard, c) // what the server sends, until it closes
		return err
	}, nil
}

// holdStream opens an authenticated connection with a Receive stream
// that carries nothing.
func holdStream(target string, conf *tls.Config) (func() error, error) {
	cc, err := transporttest.Dial(target, conf)
	if err != nil {
		return nil, err
	}
	s, err := cc.Hold()
	if err != nil {
		_ = cc.Close()
		return nil, err
	}
	return func() error {
		defer cc.Close()
		return <-s.Done()
	}, nil
}

// holdSilent opens a connection that never sends a byte.
func holdSilent(target string) (func() error, error) {
	c, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return func() error {
		defer c.Close()
		_, err := io.Copy(io.Discard, c)
		return err
	}, nil
}

// counts are what an attacker process last said: connections opened,
// open now, and closed by the server ("opened N live L closed C"; all -1
// before its first line).
func (p *attackerProc) counts() (opened, live, closed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Sscanf(p.line, "opened %d live %d closed %d", &opened, &live, &closed); err != nil {
		return -1, -1, -1
	}
	return opened, live, closed
}

// closedByServer is how many connections a's processes say the server
// closed.
func (a *halfOpen) closedByServer() int {
	n := 0
	for _, p := range a.procs {
		_, _, closed := p.counts()
		n += max(closed, 0)
	}
	return n
}
