package boundary_test

import (
	"io"
	"testing"

	"github.com/stockade-dev/stockade/boundary/identity"
)

// BenchmarkConnectTunnel measures the whole proxy path per tunnel in one
// process: accept, conn actor, identity (netlink: the lookup at accept and
// its recheck), decision, dial, 200, 64 bytes echoed both ways, close.
func BenchmarkConnectTunnel(b *testing.B) { benchTunnels(b, envOpts{}) }

// BenchmarkConnectTunnelTamperCheck is BenchmarkConnectTunnel with the
// tamper check a sandbox's boundary makes (the client's mappings judged
// once per exec, its tracer read at every connection as where the
// workload may ptrace).
func BenchmarkConnectTunnelTamperCheck(b *testing.B) {
	benchTunnels(b, envOpts{idOpts: []identity.Option{identity.WithTamperCheck(identity.TamperPolicy{
		ReadOnly: []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"}, Writable: []string{"/tmp/x"}, TracerEveryCall: true})}})
}

func benchTunnels(b *testing.B, o envOpts) {
	e := startEnv(b, o)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 64)
		for pb.Next() {
			code, body, c := e.connect(b, "up.test", e.echoPort)
			if code != 200 {
				b.Fatalf("CONNECT: %d %s", code, body)
			}
			_, _ = c.Write(buf)
			_, _ = io.ReadFull(c, buf)
			_ = c.Close()
		}
	})
}
