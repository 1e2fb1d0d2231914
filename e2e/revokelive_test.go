package e2e

import (
	"testing"
	"time"

	"github.com/stockade-dev/stockade/transport/transporttest"
	"github.com/stockade-dev/stockade/trust"
)

// TestClusterRevokedConnectionsClosed: in a cluster of two nodes, viewers
// vic and keeper each hold a connection with an open stream to both
// nodes; vic is revoked through n2. Both nodes close vic's connections
// within seconds (each node's sweep asks its own view of the client
// records, which follows etcd), and keeper's stay open.
func TestClusterRevokedConnectionsClosed(t *testing.T) {
	cw := newClusterWorld(t, 2)
	c := newClients(t, cw.world)
	for _, name := range []string{"vic", "keeper"} {
		if code, out, errOut := c.issue("", name, "--role", "viewer"); code != 0 {
			t.Fatalf("issue %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	hold := func(name string, node *clusterNode) *transporttest.Stream {
		t.Helper()
		cf, err := trust.ReadClientConfig(c.bundle(name))
		if err != nil {
			t.Fatal(err)
		}
		kp, err := trust.KeyPair([]byte(cf.Cert), []byte(cf.Key))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := transporttest.Dial(node.addr, transporttest.WithCert(kp))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		s, err := conn.Hold()
		if err != nil {
			t.Fatalf("%s's stream to %s: %v", name, node.name, err)
		}
		t.Cleanup(s.Close)
		return s
	}
	type held struct {
		who, node string
		s         *transporttest.Stream
	}
	var vic, keeper []held
	for _, n := range cw.nodes {
		vic = append(vic, held{"vic", n.name, hold("vic", n)})
		keeper = append(keeper, held{"keeper", n.name, hold("keeper", n)})
	}
	n2 := cw.nodes[1]
	if out, errOut, code := run(t, nil, "client", "revoke", "vic", "--state-dir", cw.state, "--gateway", n2.addr); code != 0 {
		t.Fatalf("revoke vic through n2: exit %d\n%s%s", code, out, errOut)
	}
	revoked := time.Now()
	for _, h := range vic {
		if !h.s.Ended(15*time.Second - time.Since(revoked)) {
			t.Fatalf("vic's stream to %s is open 15 s after vic was revoked through n2", h.node)
		}
		t.Logf("vic's stream to %s ended %s after the revocation: %v", h.node, time.Since(revoked).Round(100*time.Millisecond), <-h.s.Done())
	}
	for _, h := range keeper {
		if h.s.Ended(0) {
			t.Fatalf("keeper's stream to %s ended with vic's revocation", h.node)
		}
	}
}
