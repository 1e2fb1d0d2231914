package harness

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/bench/loadgen"
	"github.com/stockade-dev/stockade/sandbox/nsrun"
)

// TestSandboxProxyIsTheProducts: the address the loads use inside the
// sandbox is the one the product gives its workloads.
func TestSandboxProxyIsTheProducts(t *testing.T) {
	if "http://"+sandboxProxy != nsrun.ProxyURL || !strings.HasSuffix(sandboxProxy, ":3128") || nsrun.ProxyPort != 3128 {
		t.Fatalf("sandboxProxy %q, product's %q (port %d)", sandboxProxy, nsrun.ProxyURL, nsrun.ProxyPort)
	}
	if !strings.HasPrefix(sandboxLoadgen, nsrun.WorkspaceMount+"/") {
		t.Fatalf("loadgen %q is not in the workspace mount %q", sandboxLoadgen, nsrun.WorkspaceMount)
	}
}

func TestParseSandboxStatus(t *testing.T) {
	ok := `{"name":"bench","phase":"Ready","message":"running","workspace":"/s/sandboxes/bench/workspace","supervisorPid":24561,"workloadPid":24595}`
	st, err := parseSandboxStatus([]byte(ok))
	if err != nil || st.SupervisorPid != 24561 || st.Workspace != "/s/sandboxes/bench/workspace" {
		t.Fatalf("%+v, %v", st, err)
	}
	for _, bad := range []string{
		`{"phase":"Error","message":"no such binary","workspace":"/w","supervisorPid":1}`,
		`{"phase":"Ready","workspace":"","supervisorPid":1}`,
		`{"phase":"Ready","workspace":"/w","supervisorPid":0}`,
		`not json`,
	} {
		if _, err := parseSandboxStatus([]byte(bad)); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestExecArgs(t *testing.T) {
	g := &gatewayRun{bin: "/b/stockade", state: "/s", api: "127.0.0.1:7"}
	got := g.execArgs(10*time.Second, []string{"tunnels", "-c", "16"})
	want := []string{"sandbox", "--state-dir", "/s", "--gateway", "127.0.0.1:7", "--log-format", "json",
		"exec", sandboxName, "--timeout", "30s", "--", sandboxLoadgen, "tunnels", "-c", "16"}
	if !slices.Equal(got, want) {
		t.Fatalf("exec args\n got %q\nwant %q", got, want)
	}
	h := &harness{loadgen: "/run/loadgen", gw: g}
	if p, a := h.loadgenCmd(&system{name: "stockade"}, time.Second, []string{"bulk"}); p != "/run/loadgen" || !slices.Equal(a, []string{"bulk"}) {
		t.Fatalf("host system runs %s %q", p, a)
	}
	if p, a := h.loadgenCmd(&system{name: "sandbox", inSandbox: true}, time.Second, []string{"bulk"}); p != "/b/stockade" || a[len(a)-1] != "bulk" {
		t.Fatalf("sandbox system runs %s %q", p, a)
	}
}

// fakeHarness is a harness with measurements filled in by hand, as the
// measure step would record them, for the row logic.
func fakeHarness(sandboxWhy string) *harness {
	h := &harness{
		cfg:       Config{Concurrency: []int{16}, HoldTunnels: 1000},
		stockade:  &system{name: "stockade"},
		sandbox:   &system{name: "sandbox", inSandbox: true, why: sandboxWhy},
		tinyproxy: &system{name: "tinyproxy"},
		dnsmasq:   &system{name: "dnsmasq"},
		direct:    &system{name: "direct"},
		gofloor:   &system{name: "gofloor"},
		noID:      &system{name: noIdentity},
		serveCG:   &system{name: serveCgroup},
		tunnels:   map[string][]tunnelRun{}, bulk: map[string][]loadgen.BulkResult{},
		dnsRuns: map[string][]dnsRun{}, rss: map[string]*rssResult{}, failed: map[string][]string{},
	}
	run := func(rate float64, p50 time.Duration, cpu time.Duration) []tunnelRun {
		return []tunnelRun{{res: loadgen.TunnelResult{Tunnels: int64(rate * 2), PerSecond: rate, P50Ns: p50.Nanoseconds(), P99Ns: 2 * p50.Nanoseconds(),
			CPUNs: int64(rate * 2 * 150e3)}, cpu: cpuTime{user: cpu / 4, sys: cpu - cpu/4}}} // the load: 150µs per tunnel
	}
	h.tunnels["stockade/c=16"] = run(5000, 2*time.Millisecond, time.Second)           // 100µs per tunnel
	h.tunnels["tinyproxy/c=16"] = run(4000, 3*time.Millisecond, 800*time.Millisecond) // 100µs
	h.tunnels["direct/c=16"] = run(10000, time.Millisecond, 0)
	h.tunnels["gofloor/c=16"] = run(6000, 2*time.Millisecond, 600*time.Millisecond)     // 50µs
	h.tunnels[noIdentity+"/c=16"] = run(5500, 2*time.Millisecond, 880*time.Millisecond) // 80µs
	h.bulk["gofloor"] = []loadgen.BulkResult{{MBps: 1200}}
	h.bulk["stockade"] = []loadgen.BulkResult{{MBps: 1500}}
	h.bulk["tinyproxy"] = []loadgen.BulkResult{{MBps: 400}}
	h.bulk["direct"] = []loadgen.BulkResult{{MBps: 2000}}
	if sandboxWhy == "" {
		h.tunnels["sandbox/c=16"] = run(2000, 5*time.Millisecond, 2*time.Second)              // 500µs per tunnel
		h.tunnels["sandbox/c=16"][0].res.CPUNs = 2000 * 2 * 250e3                             // the load in the sandbox: 250µs
		h.tunnels[serveCgroup+"/c=16"] = run(2100, 4*time.Millisecond, 1890*time.Millisecond) // 450µs
		h.tunnels[serveCgroup+"/c=16"][0].res.CPUNs = 2100 * 2 * 240e3
		h.bulk["sandbox"] = []loadgen.BulkResult{{MBps: 1300}}
		h.rss["sandbox"] = &rssResult{idle: 40 << 20, held: 60 << 20, hold: loadgen.HoldResult{Requested: 1000, Established: 1000, Alive: 1000}, haveHold: true}
	}
	h.rss["stockade"] = &rssResult{idle: 20 << 20, held: 30 << 20, after: 25 << 20, hold: loadgen.HoldResult{Requested: 1000, Established: 1000, Alive: 1000}, haveHold: true}
	h.rss["tinyproxy"] = &rssResult{idle: 2 << 20, held: 12 << 20, hold: loadgen.HoldResult{Requested: 1000, Established: 900, Alive: 900, Errors: 100}, haveHold: true}
	return h
}

func rowByName(t *testing.T, rows []Row, name string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q in %v", name, rows)
	return Row{}
}

// TestBaseRows: the boundary's CPU per tunnel against gofloor's and
// against its own without identity, each then against tinyproxy's; no
// such row when that system did not run.
func TestBaseRows(t *testing.T) {
	for _, tc := range []struct {
		row, peer, ratio string
		off              func(h *harness) // the system does not run
		part             string           // what names its rows
	}{
		{"server CPU per tunnel c=16 vs the Go floor", "50.0µs (user 12.5µs) gofloor at 6000/s", "2.00x (gofloor/tinyproxy 0.50x)",
			func(h *harness) {
				h.gofloor.why = "not serving"
				delete(h.tunnels, "gofloor/c=16")
				delete(h.bulk, "gofloor")
			}, "Go floor"},
		{"server CPU per tunnel c=16 vs the boundary without identity", "80.0µs (user 20.0µs) --identity none at 5500/s",
			"1.25x (without identity/tinyproxy 0.80x)",
			func(h *harness) {
				h.noID.why = "stockade runs --identity none already"
				delete(h.tunnels, noIdentity+"/c=16")
			}, "without identity"},
	} {
		t.Run(tc.part, func(t *testing.T) {
			h := fakeHarness("")
			r := rowByName(t, h.networkRows(), tc.row)
			if r.Stockade != "100.0µs (user 25.0µs)" || r.Peer != tc.peer || r.Ratio != tc.ratio || r.Target != "" || r.Verdict != Info {
				t.Fatalf("row %+v", r)
			}
			h = fakeHarness("")
			tc.off(h)
			for _, r := range h.networkRows() {
				if strings.Contains(r.Name, tc.part) {
					t.Fatalf("a row for a system that did not run: %+v", r)
				}
			}
		})
	}
}

// TestFloorBulkRow: the boundary's bulk rate against gofloor's, then
// gofloor's against direct.
func TestFloorBulkRow(t *testing.T) {
	b := rowByName(t, fakeHarness("").networkRows(), "bulk MB/s vs the Go floor")
	if b.Stockade != "1500" || b.Peer != "1200 gofloor" || b.Direct != "2000" || b.Ratio != "1.25x (gofloor/direct 0.60x)" || b.Verdict != Info {
		t.Fatalf("bulk floor row %+v", b)
	}
}

// TestNoIdentityNote: the header says what the rows without identity
// compare, only when that serve ran.
func TestNoIdentityNote(t *testing.T) {
	says := func(h *harness) bool {
		h.header()
		return slices.ContainsFunc(h.notes, func(n string) bool { return strings.HasPrefix(n, "without identity rows: "+noIdentity) })
	}
	if h := fakeHarness(""); !says(h) {
		t.Fatalf("no note says what the row compares: %q", h.notes)
	}
	h := fakeHarness("")
	h.noID.why = "not serving"
	if says(h) {
		t.Fatalf("a note for a serve that did not run: %q", h.notes)
	}
}

func TestSandboxRows(t *testing.T) {
	h := fakeHarness("")
	rows := h.networkRows()
	rate := rowByName(t, rows, "sandbox CONNECT tunnels/s c=16")
	if rate.Stockade != "2000" || rate.Peer != "4000 tinyproxy, 5000 serve" || rate.Ratio != "0.50x / 0.40x" ||
		rate.Target != ">= 1.0x tinyproxy (goal 1.3x)" || rate.Verdict != Miss {
		t.Fatalf("rate row %+v", rate)
	}
	if sk := rowByName(t, rows, "CONNECT tunnels/s c=16"); sk.Verdict != Pass || sk.Ratio != "1.25x" {
		t.Fatalf("standalone rate row %+v", sk)
	}
	added := rowByName(t, rows, "sandbox tunnel p50 added vs direct c=16")
	if added.Stockade != "+4.00ms" || added.Peer != "+2.00ms tinyproxy, +1.00ms serve" || added.Verdict != Miss || added.Ratio != "2.00x / 4.00x" {
		t.Fatalf("added row %+v", added)
	}
	cpu := rowByName(t, rows, "sandbox supervisor CPU per tunnel c=16")
	if cpu.Stockade != "500.0µs (user 125.0µs)" || cpu.Peer != "100.0µs (user 25.0µs) tinyproxy, 100.0µs (user 25.0µs) serve" || cpu.Verdict != Miss || cpu.Ratio != "5.00x / 5.00x" {
		t.Fatalf("cpu row %+v", cpu)
	}
	if sk := rowByName(t, rows, "server CPU per tunnel c=16"); sk.Verdict != Pass || sk.Target != "<= tinyproxy's" {
		t.Fatalf("standalone cpu row %+v", sk)
	}
	bulk := rowByName(t, rows, "sandbox bulk MB/s, 1 tunnel")
	if bulk.Verdict != Pass || bulk.Peer != "400 tinyproxy, 1500 serve" || bulk.Target != ">= 3x tinyproxy" {
		t.Fatalf("bulk row %+v", bulk)
	}
	if d := rowByName(t, rows, "sandbox bulk MB/s vs direct"); d.Verdict != Miss /* 1300 < 0.7 x 2000 */ || d.Target != ">= 0.7x direct" {
		t.Fatalf("bulk vs direct row %+v", d)
	}
	held := rowByName(t, rows, "sandbox supervisor RSS, 1000 tunnels open")
	if held.Stockade != "60.0 MiB (1000/1000 open, 20.5 KiB/tunnel)" || held.Verdict != Info {
		t.Fatalf("held row %+v", held)
	}
	if idle := rowByName(t, rows, "boundary serve RSS idle"); idle.Stockade != "20.0 MiB, 25.0 MiB after the runs" || idle.Peer != "2.0 MiB tinyproxy" {
		t.Fatalf("idle row %+v", idle)
	}
	if !slices.ContainsFunc(h.notes, func(n string) bool { return strings.Contains(n, "tinyproxy hold: 900 of 1000") }) {
		t.Fatalf("a short hold must be noted: %q", h.notes)
	}
}

// TestSameLoadRows: the supervisor against serve loaded from a like
// cgroup, within 10% on rate and CPU to pass; the loads' own CPU shown.
func TestSameLoadRows(t *testing.T) {
	h := fakeHarness("")
	same := rowByName(t, h.networkRows(), "sandbox vs serve, the load in a like cgroup c=16")
	if same.Stockade != "2000/s, 500.0µs (user 125.0µs)" || same.Peer != "2100/s, 450.0µs (user 112.5µs) serve-cgroup" ||
		same.Ratio != "rate 0.95x, CPU 1.11x" || same.Target != "rate >= 0.9x, CPU <= 1.1x serve's" || same.Verdict != Miss {
		t.Fatalf("same-load row %+v", same)
	}
	load := rowByName(t, h.networkRows(), "load generator CPU per tunnel c=16")
	if load.Stockade != "250.0µs in the sandbox" || load.Peer != "150.0µs serve's, 240.0µs serve-cgroup's" || load.Ratio != "1.67x" || load.Verdict != Info {
		t.Fatalf("load row %+v", load)
	}
	h.tunnels["sandbox/c=16"][0].cpu = cpuTime{user: time.Second / 2, sys: 3 * time.Second / 2} // 500 -> 490µs: 1.09x
	h.tunnels["sandbox/c=16"][0].res.Tunnels = 4080
	if r := rowByName(t, h.networkRows(), "sandbox vs serve, the load in a like cgroup c=16"); r.Verdict != Pass {
		t.Fatalf("within 10%%, yet %+v", r)
	}
	h.serveCG.why = "only beside the sandbox (needs root)"
	delete(h.tunnels, serveCgroup+"/c=16")
	if r := rowByName(t, h.networkRows(), "sandbox vs serve, the load in a like cgroup c=16"); r.Peer != h.serveCG.why || r.Verdict != NotRun {
		t.Fatalf("no serve-cgroup, yet %+v", r)
	}
}

// TestSandboxRowsWhy: a sandbox that could not run shows why in each of
// its rows, judged n/a; turned off, it has no rows at all.
func TestSandboxRowsWhy(t *testing.T) {
	rows := fakeHarness("needs root").networkRows()
	for _, name := range []string{"sandbox CONNECT tunnels/s c=16", "sandbox supervisor CPU per tunnel c=16",
		"sandbox bulk MB/s, 1 tunnel", "sandbox supervisor RSS idle"} {
		r := rowByName(t, rows, name)
		if r.Stockade != "needs root" || (r.Target != "" && r.Verdict != NotRun) {
			t.Errorf("%s: %+v", name, r)
		}
	}
	for _, r := range fakeHarness(sandboxOff).networkRows() {
		if strings.HasPrefix(r.Name, "sandbox") {
			t.Errorf("sandbox off, yet row %+v", r)
		}
	}
}

// TestStartSandboxFailure: a gateway that cannot start leaves the sandbox
// system unmeasured with a reason and a note (not a failed run), and
// stopSandbox then has nothing left to stop.
func TestStartSandboxFailure(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "stockade")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"gateway: cannot map uids\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := fakeHarness("")
	h.dir, h.srvs, h.cfg.Log = dir, &servers{dir: dir, log: zerolog.Nop()}, zerolog.Nop()
	h.files = files{hosts: filepath.Join(dir, "hosts"), policy: filepath.Join(dir, "policy.yaml")}
	defer h.srvs.stopAll()
	h.startSandbox(context.Background(), fake)
	want := "gateway not ready"
	if os.Geteuid() != 0 {
		want = "needs root"
	}
	if h.sandbox.why != want {
		t.Fatalf("why = %q, want %q (notes %q)", h.sandbox.why, want, h.notes)
	}
	if want == "gateway not ready" && !slices.ContainsFunc(h.notes, func(n string) bool { return strings.Contains(n, "cannot map uids") }) {
		t.Fatalf("the note must carry the gateway's log: %q", h.notes)
	}
	h.stopSandbox(context.Background())
	if h.gw != nil {
		t.Fatal("stopSandbox left the gateway")
	}
}
