package boundary_test

import (
	"io"
	"testing"
)

// BenchmarkConnectTunnel measures the whole proxy path per tunnel in one
// process: accept, conn actor, identity (netlink), decision, dial, 200,
// 64 bytes echoed both ways, close.
func BenchmarkConnectTunnel(b *testing.B) {
	e := startEnv(b, envOpts{})
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
