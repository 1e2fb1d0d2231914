package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/client"
	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/internal/testenv"
	"github.com/stockade-dev/stockade/messages"
	"github.com/stockade-dev/stockade/trust"
)

// BenchmarkCluster is `make bench-cluster` (a benchmark, so `go test`
// runs it only with -bench: it runs hundreds of sandboxes for minutes;
// one pass whatever b.N, the figures are its table): failover time against sandbox count
// (30, 100, 200 over 3 nodes: SIGKILL the node owning most, until every
// sandbox is Ready under a survivor), and API latency (p50/p99 of get and
// list, in process through the client package) with 200 sandboxes over 3
// nodes against one node. It prints one table.
func BenchmarkCluster(b *testing.B) {
	var t testing.TB = b
	b.StopTimer()
	counts := []int{30, 100, 200}
	if v := os.Getenv("STOCKADE_E2E_CLUSTER_BENCH_COUNTS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			var n int
			if _, err := fmt.Sscan(f, &n); err == nil && n > 0 {
				counts = append(counts, n)
			}
		}
	}
	total := counts[len(counts)-1]
	var rows []string

	// One node, the embedded default: the API with `total` sandboxes.
	single := newWorld(t, 0)
	createNoWait(t, single.cli, single.policy, "b", total)
	waitReady(t, single.cli, "b", total, 5*time.Minute)
	getS, listS := apiLatency(t, single.state, single.addr, "b", total)
	single.shutdown()

	c := newClusterWorld(t, 3)
	made := 0
	for _, n := range counts {
		createNoWait(t, func(args ...string) (string, string, int) { return c.via(c.nodes[0], args...) }, c.policy, fmt.Sprintf("c%d-", n), n-made)
		made = n
		sbs := map[string]status{}
		testenv.Eventually(t, 5*time.Minute, func() bool {
			clear(sbs)
			for _, s := range c.list(c.alive()[0]) {
				if s.Phase == "Ready" && s.Node != "" {
					sbs[s.Name] = s
				}
			}
			return len(sbs) == n
		}, "%d sandboxes Ready", n)
		victim, count := c.busiest(sbs)
		killed := time.Now()
		if err := victim.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		victim.proc = nil
		after := map[string]status{}
		testenv.Eventually(t, 60*time.Second, func() bool {
			clear(after)
			for _, s := range c.list(c.alive()[0]) {
				if s.Phase == "Ready" && s.Node != "" && s.Node != victim.name {
					after[s.Name] = s
				}
			}
			return len(after) == n
		}, "all %d Ready under survivors", n)
		took := failoverTime(t, sbs, after, victim.name, killed)
		rows = append(rows, fmt.Sprintf("failover, %3d sandboxes (%3d moved)        %8s", n, count[victim.name], took.Round(10*time.Millisecond)))
		c.start(victim)
	}
	// Through a node that owns about a third: the rest is forwarded (get)
	// or answered from its view (list).
	getC, listC := apiLatency(t, c.state, c.nodes[0].addr, "c", total)
	t.Logf("\ncluster benchmark (this machine, %s)\n%s\n"+
		"API with %d sandboxes          p50 one node  p50 3 nodes  ratio   p99 one node  p99 3 nodes\n"+
		"get (200 requests)             %12s %12s %6.2f   %12s %12s\n"+
		"list (50 requests)             %12s %12s %6.2f   %12s %12s",
		time.Now().UTC().Format("2006-01-02"), strings.Join(rows, "\n"), total,
		getS[0], getC[0], ratio(getC[0], getS[0]), getS[1], getC[1],
		listS[0], listC[0], ratio(listC[0], listS[0]), listS[1], listC[1])
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// createNoWait creates n sandboxes prefix0.. without waiting.
func createNoWait(t testing.TB, cli func(...string) (string, string, int), policy, prefix string, n int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		if out, errOut, code := cli("create", name, "--no-wait", "--policy", policy, "--", "/bin/sh", "-c", "exec sleep infinity"); code != 0 {
			t.Fatalf("create %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
}

func waitReady(t testing.TB, cli func(...string) (string, string, int), prefix string, n int, d time.Duration) {
	t.Helper()
	testenv.Eventually(t, d, func() bool {
		out, _, code := cli("list")
		return code == 0 && strings.Count(out, " Ready ") >= n
	}, "%d sandboxes Ready", n)
}

// apiLatency measures get (of sandboxes prefix*, round robin) and list
// through the client package on addr: p50 and p99 of each.
func apiLatency(t testing.TB, state, addr, prefix string, n int) (get, list [2]time.Duration) {
	t.Helper()
	cfg, _, err := trust.LoadClientConfig([]string{contract.StateDir(state).ClientConfig()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(addr, cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, _ := c.Request(ctx, &messages.ListRequest{})
	var names []string
	for _, s := range l.GetSandboxes() {
		if strings.HasPrefix(s.Name, prefix) {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		t.Fatalf("no sandboxes %s* to get", prefix)
	}
	measure := func(k int, msg func(i int) *messages.SandboxRequest, isList bool) [2]time.Duration {
		var d []time.Duration
		for i := range k {
			start := time.Now()
			var r *messages.Reply
			var err error
			if isList {
				r, err = c.Request(ctx, &messages.ListRequest{})
			} else {
				r, err = c.Request(ctx, msg(i))
			}
			if err != nil || r.Status != messages.Status_STATUS_OK {
				t.Fatalf("request %d: %v %v", i, err, r.GetMessage())
			}
			d = append(d, time.Since(start))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return [2]time.Duration{d[len(d)/2].Round(10 * time.Microsecond), d[len(d)*99/100].Round(10 * time.Microsecond)}
	}
	get = measure(200, func(i int) *messages.SandboxRequest {
		return &messages.SandboxRequest{Name: names[i%len(names)], Verb: messages.Verb_VERB_GET}
	}, false)
	list = measure(50, nil, true)
	return get, list
}
