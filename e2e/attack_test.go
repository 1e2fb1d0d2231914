package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/sandbox/spec"
	"github.com/stockade-dev/stockade/transport"
	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// TestControlPlaneAttacks plays the attacker against a real gateway and a
// real supervisor (gateway as root and unprivileged): with no TLS, with no
// certificate, with a certificate of another CA, with a valid client
// certificate at the wrong actor, and with sandbox a's supervisor
// certificate at sandbox b. Every attack is refused; afterwards the
// gateway and supervisors are the same processes, both sandboxes are Ready
// with the same workloads and policy version, nothing dialed the
// attacker's listener, and `sandbox list` answers.
func TestControlPlaneAttacks(t *testing.T) {
	modes(t, func(t *testing.T, w *world) {
		before := map[string]status{"a": w.create("a", `exec sleep 1000`), "b": w.create("b", `exec sleep 1000`)}
		gwPid := w.gw.Process.Pid
		supAddr := supervisorEndpoint(t, w, "a")

		// The attacker's listener: any dial-back (a reply, an OpenRelay) lands here.
		var dialBacks atomic.Int64
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				dialBacks.Add(1)
				_ = c.Close()
			}
		}()
		trap := actor.NewPID(ln.Addr().String(), "future$trap")

		gw := func(id string) *actor.PID { return actor.NewPID(w.addr, id) }
		sup := func(id string) *actor.PID { return actor.NewPID(supAddr, id) }
		attacks := []struct {
			name string
			b    *remote.MessageBatch
		}{
			{"list to gateway/sandboxes", transporttest.Batch(gw(transport.SandboxesActor), &messages.ListRequest{}, trap)},
			{"delete via gateway/sandboxes", transporttest.Batch(gw(transport.SandboxesActor), &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_DELETE}, nil)},
			{"create via api", transporttest.Batch(gw(transport.APIActor), &messages.CreateRequest{Name: "evil", Policy: []byte("version: 1\n")}, trap)},
			{"relay token via api", transporttest.Batch(gw(transport.APIActor), &messages.RelayRequest{Name: "a"}, trap)},
			{"heartbeat to a's session", transporttest.Batch(gw(transport.GatewaySessionPrefix("a")+"1"), &messages.Heartbeat{Sandbox: "a"}, nil)},
			{"out-of-range batch at gateway", transporttest.OutOfRange(gw(transport.APIActor), &messages.ListRequest{})},
			{"Stop to api", transporttest.Stop(gw(transport.APIActor))},
			{"4 MiB to api", transporttest.Large(gw(transport.APIActor), 4<<20)},
			{"SetPolicy v1000 to supervisor", transporttest.Batch(sup(transport.SupervisorSession), &messages.SetPolicy{Sandbox: "a", Policy: []byte("version: 1\n"), Version: 1000}, trap)},
			{"OpenRelay to supervisor", transporttest.Batch(sup(transport.SupervisorSession), &messages.OpenRelay{Token: "x", Addr: ln.Addr().String()}, nil)},
			{"FaultRequest to supervisor", transporttest.Batch(sup(transport.SupervisorSession), &messages.FaultRequest{Name: "a", Rule: "identity.lookup=panic"}, trap)},
			{"out-of-range batch at supervisor", transporttest.OutOfRange(sup(transport.SupervisorSession), &messages.OpenRelay{})},
			{"Stop to supervisor session", transporttest.Stop(sup(transport.SupervisorSession))},
			{"4 MiB to supervisor", transporttest.Large(sup(transport.SupervisorSession), 4<<20)},
		}
		other, err := transporttest.OtherCA(t.TempDir(), trust.Identity{Role: trust.RoleClient, Name: "admin"})
		if err != nil {
			t.Fatal(err)
		}
		otherGW, err := transporttest.OtherCA(t.TempDir(), trust.Identity{Role: trust.RoleGateway, Name: "local"})
		if err != nil {
			t.Fatal(err)
		}
		creds := map[string]*tls.Config{
			"plaintext":                     nil,
			"no certificate":                transporttest.NoCertTLS(),
			"another CA":                    other,
			"another CA (gateway identity)": otherGW,
		}
		for cname, conf := range creds {
			for _, addr := range []string{w.addr, supAddr} {
				conn, err := transporttest.Dial(addr, conf)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range []string{"ListProcesses", "GetProcessDiagnostics"} {
					if err := conn.Unary(m); !transporttest.Refused(err) {
						t.Errorf("%s: %s at %s: %v, want refused", cname, m, addr, err)
					}
				}
				for _, a := range attacks {
					if err := conn.Send(a.b, 300*time.Millisecond); !transporttest.Refused(err) {
						t.Errorf("%s: %s (%s): %v, want refused", cname, a.name, addr, err)
					}
				}
				_ = conn.Close()
			}
		}

		// A valid client certificate: only api, only client requests.
		cfg, err := trust.ReadClientConfig(contract.StateDir(w.state).ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		clientKP, err := trust.KeyPair([]byte(cfg.Cert), []byte(cfg.Key))
		if err != nil {
			t.Fatal(err)
		}
		// sandbox a's supervisor certificate, from its spec.
		supKP := supervisorCert(t, w, "a")
		valid := []struct {
			who, addr, name string
			b               *remote.MessageBatch
			refused         bool
		}{
			{"client", w.addr, "list to api", transporttest.Batch(gw(transport.APIActor), &messages.ListRequest{}, nil), false},
			{"client", w.addr, "list to gateway/sandboxes", transporttest.Batch(gw(transport.SandboxesActor), &messages.ListRequest{}, nil), true},
			{"client", w.addr, "stop to gateway/sandboxes/sandbox/a", transporttest.Batch(gw(transport.SandboxActorID("a")), &messages.SandboxRequest{Name: "a", Verb: messages.Verb_VERB_STOP}, nil), true},
			{"client", w.addr, "heartbeat to a's session", transporttest.Batch(gw(transport.GatewaySessionPrefix("a")+"1"), &messages.Heartbeat{Sandbox: "a"}, nil), true},
			{"client", w.addr, "list with a reply address elsewhere", transporttest.Batch(gw(transport.APIActor), &messages.ListRequest{}, actor.NewPID("127.0.0.2:1", "future$x")), true},
			{"client", w.addr, "Stop to api", transporttest.Stop(gw(transport.APIActor)), true},
			{"client", w.addr, "out-of-range batch to api", transporttest.OutOfRange(gw(transport.APIActor), &messages.ListRequest{}), true},
			{"client", w.addr, "4 MiB to api", transporttest.Large(gw(transport.APIActor), 4<<20), true},
			{"client", supAddr, "SetPolicy to supervisor", transporttest.Batch(sup(transport.SupervisorSession), &messages.SetPolicy{Sandbox: "a", Version: 1000}, nil), true},
			{"supervisor a", w.addr, "heartbeat to b's session", transporttest.Batch(gw(transport.GatewaySessionPrefix("b")+"1"), &messages.Heartbeat{Sandbox: "b"}, nil), true},
			{"supervisor a", w.addr, "list to api", transporttest.Batch(gw(transport.APIActor), &messages.ListRequest{}, nil), true},
			{"supervisor a", w.addr, "delete to api", transporttest.Batch(gw(transport.APIActor), &messages.SandboxRequest{Name: "b", Verb: messages.Verb_VERB_DELETE}, nil), true},
			{"supervisor a", supAddr, "SetPolicy to its own supervisor", transporttest.Batch(sup(transport.SupervisorSession), &messages.SetPolicy{Sandbox: "a", Version: 1000}, nil), true},
			// protoactor's futures are named from a counter; no peer may
			// address one (a reply goes to transport.NewFuture's random
			// address, from the identity its request went to).
			{"supervisor a", w.addr, "reply to a counter future", transporttest.Batch(gw("future$1"), &messages.Reply{Status: messages.Status_STATUS_OK}, nil), true},
			{"supervisor a", w.addr, "reply to another counter future", transporttest.Batch(gw("future$Aa9"), &messages.Reply{Status: messages.Status_STATUS_OK}, nil), true},
		}
		conn, err := transporttest.Dial(w.addr, transporttest.WithCert(clientKP))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"ListProcesses", "GetProcessDiagnostics"} {
			if err := conn.Unary(m); grpcstatus.Code(err) != codes.Unimplemented {
				t.Errorf("client: %s: %v, want Unimplemented", m, err)
			}
		}
		_ = conn.Close()
		for _, v := range valid {
			kp := clientKP
			if v.who != "client" {
				kp = supKP
			}
			conn, err := transporttest.Dial(v.addr, transporttest.WithCert(kp))
			if err != nil {
				t.Fatal(err)
			}
			err = conn.Send(v.b, 300*time.Millisecond)
			if got := transporttest.Refused(err); got != v.refused {
				t.Errorf("%s: %s: refused=%v (%v), want refused=%v", v.who, v.name, got, err, v.refused)
			}
			_ = conn.Close()
		}
		// sandbox a's supervisor says Hello for b: the hello actor refuses it
		// (the certificate names a), and b keeps its session.
		conn, err = transporttest.Dial(w.addr, transporttest.WithCert(supKP))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Send(transporttest.Batch(gw(transport.HelloActor), &messages.Hello{Sandbox: "b", Instance: "x", Supervisor: trap}, nil), 300*time.Millisecond)
		_ = conn.Close()
		testenv.Eventually(t, 5*time.Second, func() bool {
			return strings.Contains(w.gwLog.String(), "Hello refused: the certificate names another sandbox")
		}, "the gateway to log the refused Hello")

		// Nothing changed.
		time.Sleep(500 * time.Millisecond)
		if err := syscall.Kill(gwPid, 0); err != nil || w.gw.ProcessState != nil {
			t.Fatalf("the gateway (pid %d) is gone: %v\n%s", gwPid, err, w.gwLog)
		}
		for name, b := range before {
			s, code := w.get(name)
			if code != 0 || s.Phase != "Ready" || s.SupervisorPid != b.SupervisorPid || s.WorkloadPid != b.WorkloadPid {
				t.Errorf("sandbox %s after the attacks: exit %d, %+v; before: %+v", name, code, s, b)
			}
			if err := syscall.Kill(b.SupervisorPid, 0); err != nil {
				t.Errorf("supervisor of %s (pid %d) is gone: %v", name, b.SupervisorPid, err)
			}
		}
		for _, name := range []string{"a", "b"} {
			out, errOut, code := w.policyCLI("get", name)
			if code != 0 || !strings.Contains(out, "version 1") {
				t.Errorf("policy get %s: exit %d %q %q, want version 1", name, code, out, errOut)
			}
		}
		if n := dialBacks.Load(); n != 0 {
			t.Errorf("%d connections dialed back to the attacker", n)
		}
		if out, errOut, code := w.cli("list"); code != 0 || !strings.Contains(out, "a ") || !strings.Contains(out, "b ") {
			t.Fatalf("list after the attacks: exit %d\n%s%s", code, out, errOut)
		}
		log := w.gwLog.String()
		for _, want := range []string{`"reason":"handshake"`, `"reason":"target"`, `"reason":"system_message"`, `"reason":"malformed"`, `"reason":"unimplemented"`, `"reason":"sender"`} {
			if !strings.Contains(log, want) {
				t.Errorf("the gateway did not log a refusal with %s", want)
			}
		}
		if !strings.Contains(log, `"peer":"supervisor:a"`) || !strings.Contains(log, `"target":"gateway/sandboxes/sandbox/b/session/1"`) {
			t.Errorf("the refusal of a's supervisor at b's session is not logged with its peer and target")
		}
		refused := metric(t, w.metrics, "stockade_remote_refused_total")
		if refused["handshake"] == 0 || refused["target"] == 0 || refused["system_message"] == 0 || refused["malformed"] == 0 {
			t.Errorf("stockade_remote_refused_total: %v", refused)
		}
		t.Logf("refused by the gateway: %v; dial-backs: %d", refused, dialBacks.Load())
	})
}

// supervisorEndpoint is the remote address sandbox name's supervisor
// listens on (its log says so when the session is up).
func supervisorEndpoint(t *testing.T, w *world, name string) string {
	t.Helper()
	re := regexp.MustCompile(`"endpoint":"([0-9.]+:[0-9]+)"[^\n]*"msg":"session up"`)
	var addr string
	testenv.Eventually(t, 10*time.Second, func() bool {
		b, _ := os.ReadFile(sandboxLog(w.state, name, contract.SupervisorLog))
		m := re.FindAllSubmatch(b, -1)
		if len(m) == 0 {
			return false
		}
		addr = string(m[len(m)-1][1])
		return true
	}, "the supervisor of %s to log its endpoint", name)
	return addr
}

// supervisorCert is sandbox name's supervisor certificate, from its spec.
func supervisorCert(t *testing.T, w *world, name string) tls.Certificate {
	t.Helper()
	sp, err := spec.Read(filepath.Join(w.state, "sandboxes", name, "spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := trust.KeyPair([]byte(sp.Credentials.Cert), []byte(sp.Credentials.Key))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// metric reads one counter of the gateway's /metrics by label value.
func metric(t *testing.T, addr, name string) map[string]float64 {
	t.Helper()
	if addr == "" {
		t.Fatal("the gateway serves no metrics (start it with --metrics)")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^` + name + `\{[a-z]+="([^"]*)"\} ([0-9.e+]+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		var v float64
		_, _ = fmt.Sscan(m[2], &v)
		out[m[1]] = v
	}
	return out
}
