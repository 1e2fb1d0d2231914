package harness

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tunnelStats are the medians over the runs of one system at one
// concurrency, and the failures summed over them.
type tunnelStats struct {
	runs                 int
	rate, p50, p99, cpuT float64 // cpuT: server CPU ns per tunnel
	errors               int64
	kinds                map[string]int64
	first                string
}

func (h *harness) tunnelStats(s *system, c int) tunnelStats {
	runs := h.tunnels[tunnelKey(s, c)]
	st := tunnelStats{runs: len(runs), kinds: map[string]int64{}}
	var rate, p50, p99, cpuT []float64
	for _, r := range runs {
		rate = append(rate, r.res.PerSecond)
		p50 = append(p50, float64(r.res.P50Ns))
		p99 = append(p99, float64(r.res.P99Ns))
		if r.res.Tunnels > 0 && r.cpu > 0 {
			cpuT = append(cpuT, float64(r.cpu.Nanoseconds())/float64(r.res.Tunnels))
		}
		st.errors += r.res.Errors
		for k, n := range r.res.ErrorKinds {
			st.kinds[k] += n
		}
		if st.first == "" {
			st.first = r.res.FirstError
		}
	}
	st.rate, st.p50, st.p99, st.cpuT = median(rate), median(p50), median(p99), median(cpuT)
	return st
}

// cell is what a table cell shows for s: why it was not measured, "no
// data" when every run failed, else the value.
func cell(s *system, runs int, value string) string {
	switch {
	case s.why != "" && runs == 0:
		return s.why
	case runs == 0:
		return "no data"
	default:
		return value
	}
}

// verdict judges a row whose stockade figure exists only when stockade
// (and the figures it is compared with) produced data.
func verdict(have bool, ok bool) Verdict {
	if !have {
		return NotRun
	}
	return judge(ok)
}

func tunnelTarget(c int) float64 {
	switch c {
	case 16:
		return 1.3
	case 64:
		return 1.5
	default:
		return 0
	}
}

func (h *harness) networkRows() []Row {
	var rows []Row
	for _, c := range h.cfg.Concurrency {
		rows = append(rows, h.tunnelRows(c)...)
	}
	rows = append(rows, h.bulkRows()...)
	rows = append(rows, h.dnsRows()...)
	for _, name := range slices.Sorted(maps.Keys(h.failed)) {
		f := h.failed[name]
		h.note("%s: %d measurement(s) failed; first: %s", name, len(f), f[0])
	}
	return rows
}

func (h *harness) tunnelRows(c int) []Row {
	sk, tp, d := h.tunnelStats(h.stockade, c), h.tunnelStats(h.tinyproxy, c), h.tunnelStats(h.direct, c)
	for _, x := range []struct {
		s  *system
		st tunnelStats
	}{{h.stockade, sk}, {h.tinyproxy, tp}, {h.direct, d}} {
		if x.st.errors > 0 {
			h.note("%s c=%d: %d failed tunnels over %d run(s) %v; first: %s", x.s.name, c, x.st.errors, x.st.runs, x.st.kinds, x.st.first)
		}
	}
	withErr := func(st tunnelStats, v string) string {
		if st.errors > 0 {
			return fmt.Sprintf("%s (%d err)", v, st.errors)
		}
		return v
	}
	haveCmp := sk.runs > 0 && tp.runs > 0
	rate := Row{
		Name:     fmt.Sprintf("CONNECT tunnels/s c=%d", c),
		Stockade: cell(h.stockade, sk.runs, withErr(sk, fmtRate(sk.rate))),
		Peer:     cell(h.tinyproxy, tp.runs, withErr(tp, fmtRate(tp.rate)+" tinyproxy")),
		Direct:   cell(h.direct, d.runs, withErr(d, fmtRate(d.rate))),
		Ratio:    fmtRatio(sk.rate, tp.rate),
	}
	if t := tunnelTarget(c); t > 0 {
		rate.Target = fmt.Sprintf(">= %.1fx tinyproxy", t)
		rate.Verdict = verdict(haveCmp, sk.rate >= t*tp.rate && sk.errors == 0)
	}
	skAdd, tpAdd := sk.p50-d.p50, tp.p50-d.p50
	haveAdd := haveCmp && d.runs > 0
	added := Row{
		Name:     fmt.Sprintf("tunnel p50 added vs direct c=%d", c),
		Stockade: cell(h.stockade, sk.runs*d.runs, "+"+fmtDur(skAdd)),
		Peer:     cell(h.tinyproxy, tp.runs*d.runs, "+"+fmtDur(tpAdd)),
		Direct:   cell(h.direct, d.runs, "p50 "+fmtDur(d.p50)),
		Target:   "<= tinyproxy's",
		Verdict:  verdict(haveAdd, skAdd <= tpAdd),
	}
	if haveAdd && tpAdd > 0 {
		added.Ratio = fmtRatio(skAdd, tpAdd)
	}
	p99 := Row{
		Name:     fmt.Sprintf("tunnel p99 c=%d", c),
		Stockade: cell(h.stockade, sk.runs, fmtDur(sk.p99)),
		Peer:     cell(h.tinyproxy, tp.runs, fmtDur(tp.p99)),
		Direct:   cell(h.direct, d.runs, fmtDur(d.p99)),
		Ratio:    fmtRatio(sk.p99, tp.p99),
	}
	cpu := Row{
		Name:     fmt.Sprintf("server CPU per tunnel c=%d", c),
		Stockade: cell(h.stockade, sk.runs, fmtDur(sk.cpuT)),
		Peer:     cell(h.tinyproxy, tp.runs, fmtDur(tp.cpuT)),
		Ratio:    fmtRatio(sk.cpuT, tp.cpuT),
	}
	return []Row{rate, added, p99, cpu}
}

func (h *harness) bulkMBps(s *system) (float64, int) {
	var v []float64
	for _, r := range h.bulk[s.name] {
		v = append(v, r.MBps)
		if r.Error != "" {
			h.note("%s bulk: transfer ended early: %s", s.name, r.Error)
		}
	}
	return median(v), len(v)
}

func (h *harness) bulkRows() []Row {
	sk, skN := h.bulkMBps(h.stockade)
	tp, tpN := h.bulkMBps(h.tinyproxy)
	d, dN := h.bulkMBps(h.direct)
	skCell := cell(h.stockade, skN, fmtRate(sk))
	return []Row{{
		Name: "bulk MB/s, 1 tunnel", Stockade: skCell,
		Peer:   cell(h.tinyproxy, tpN, fmtRate(tp)+" tinyproxy"),
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sk, tp), Target: ">= 3x tinyproxy",
		Verdict: verdict(skN > 0 && tpN > 0, sk >= 3*tp),
	}, {
		Name: "bulk MB/s vs direct", Stockade: skCell,
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sk, d), Target: ">= 0.4x direct",
		Verdict: verdict(skN > 0 && dN > 0, sk >= 0.4*d),
	}}
}

// dnsStats are the medians over the runs of one DNS server.
type dnsStats struct {
	runs, exact int
	qps, cpuQ   float64 // cpuQ: server CPU ns per completed query
	lost        int64   // summed over runs
	last        dnsResult
}

func (h *harness) dnsStats(s *system) dnsStats {
	runs := h.dnsRuns[s.name]
	st := dnsStats{runs: len(runs)}
	var qps, cpuQ []float64
	for _, r := range runs {
		qps = append(qps, r.res.QPS)
		if r.res.Completed > 0 {
			cpuQ = append(cpuQ, float64(r.cpu.Nanoseconds())/float64(r.res.Completed))
		}
		st.lost += r.res.Lost
		if r.res.splitExact() {
			st.exact++
		}
		st.last = r.res
	}
	st.qps, st.cpuQ = median(qps), median(cpuQ)
	return st
}

// split shows the last run's NOERROR/REFUSED counts (and any other code).
func (st dnsStats) split() string {
	out := fmt.Sprintf("%d/%d of %d", st.last.Rcodes["NOERROR"], st.last.Rcodes["REFUSED"], st.last.Sent)
	for _, code := range slices.Sorted(maps.Keys(st.last.Rcodes)) {
		if code != "NOERROR" && code != "REFUSED" {
			out += fmt.Sprintf(" +%s %d", code, st.last.Rcodes[code])
		}
	}
	return fmt.Sprintf("%s, exact %d/%d runs", out, st.exact, st.runs)
}

func (h *harness) dnsRows() []Row {
	sk, dm := h.dnsStats(h.stockade), h.dnsStats(h.dnsmasq)
	have := sk.runs > 0 && dm.runs > 0
	return []Row{{
		Name: "DNS queries/s (dnsperf)", Stockade: cell(h.stockade, sk.runs, fmtRate(sk.qps)),
		Peer:  cell(h.dnsmasq, dm.runs, fmtRate(dm.qps)+" dnsmasq"),
		Ratio: fmtRatio(sk.qps, dm.qps), Target: ">= 0.8x dnsmasq",
		Verdict: verdict(have, sk.qps >= 0.8*dm.qps),
	}, {
		Name: "DNS NOERROR/REFUSED (last run)", Stockade: cell(h.stockade, sk.runs, sk.split()),
		Peer:    cell(h.dnsmasq, dm.runs, dm.split()),
		Target:  "exact split, every run",
		Verdict: verdict(sk.runs > 0, sk.exact == sk.runs),
	}, {
		Name: "DNS lost queries (all runs)", Stockade: cell(h.stockade, sk.runs, strconv.FormatInt(sk.lost, 10)),
		Peer:   cell(h.dnsmasq, dm.runs, strconv.FormatInt(dm.lost, 10)),
		Target: "0", Verdict: verdict(sk.runs > 0, sk.lost == 0),
	}, {
		Name: "DNS server CPU per query", Stockade: cell(h.stockade, sk.runs, fmtDur(sk.cpuQ)),
		Peer:  cell(h.dnsmasq, dm.runs, fmtDur(dm.cpuQ)),
		Ratio: fmtRatio(sk.cpuQ, dm.cpuQ), Target: "<= 2x dnsmasq",
		Verdict: verdict(have && dm.cpuQ > 0, sk.cpuQ <= 2*dm.cpuQ),
	}}
}

// benchTarget is the target for a Go benchmark, by package and
// name: a policy decision's p99 at 1,000 endpoints (cached or not), the
// identity socket step's p99 at 200, 2,000 or 18,000 sockets. Baselines (the /proc/net/tcp scan stockade avoids)
// and other benchmarks are shown without a target.
func benchTarget(pkg, name string) (maxNs float64, label string) {
	n := strings.ToLower(name)
	has := func(subs ...string) bool {
		return slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(n, s) })
	}
	tokens := strings.FieldsFunc(n, func(r rune) bool { return strings.ContainsRune("/=_-", r) })
	socketCount := slices.ContainsFunc(tokens, func(t string) bool { return t == "200" || t == "2000" || t == "18000" })
	switch {
	case strings.Contains(pkg, "policy") && has("1000") && has("cached", "warm") && !has("uncached", "nocache"):
		return 1e3, "p99 <= 1µs"
	case strings.Contains(pkg, "policy") && has("1000") && has("decide", "decision", "eval"):
		return 20e3, "p99 <= 20µs"
	case strings.Contains(pkg, "identity") && socketCount && !has("proc_net", "procnet", "proc-net"):
		return 10e3, "p99 <= 10µs"
	}
	return 0, ""
}

// skipBenches are Go benchmarks the table does not run: e2e's
// BenchmarkCluster (etcd and three gateway nodes over hundreds of
// sandboxes, minutes per run) is run on its own by make bench-cluster.
const skipBenches = "^BenchmarkCluster$"

// goBenchRows runs the Go benchmarks of pkg and makes one row of each.
func (h *harness) goBenchRows(ctx context.Context, pkg string) []Row {
	h.cfg.Log.Info().Str("pkg", pkg).Msg("go benchmarks")
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	out, err := runCmd(ctx, h.cfg.RepoDir, h.tools.Path["go"], "test", "-run", "^$", "-bench", ".", "-skip", skipBenches,
		"-benchtime", h.cfg.BenchTime, "-count", strconv.Itoa(h.cfg.Runs), "-timeout", "15m", pkg)
	benches := parseGoBench(out)
	if err != nil {
		h.note("go test -bench %s: %s", pkg, firstLine(err.Error()))
	}
	if len(benches) == 0 {
		why := "no benchmarks"
		if err != nil {
			why = "not built"
		}
		return []Row{{Name: "go bench " + pkg, Stockade: why, Verdict: NotRun}}
	}
	var rows []Row
	for _, b := range benches {
		row := Row{Name: strings.TrimSuffix(strings.TrimPrefix(pkg, "./"), "/") + " " + strings.TrimPrefix(b.Name, "Benchmark")}
		var parts []string
		for _, u := range b.Units {
			switch v := median(b.Values[u]); {
			case u == "ns/op":
				parts = append(parts, fmtDur(v)+"/op")
			case u == "B/op" || u == "allocs/op":
			case strings.HasSuffix(u, "-ns") || strings.HasSuffix(u, "_ns"):
				parts = append(parts, u[:len(u)-3]+" "+fmtDur(v))
			default:
				parts = append(parts, fmtNum(v)+" "+u)
			}
		}
		row.Stockade = strings.Join(parts, ", ")
		if maxNs, label := benchTarget(pkg, b.Name); label != "" {
			row.Target = label
			p99, ok := b.p99Ns()
			row.Verdict = verdict(ok, p99 <= maxNs)
			if !ok {
				h.note("%s: no p99 metric reported (b.ReportMetric(..., \"p99-ns\")), target not judged", row.Name)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

func (h *harness) header() []string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	qps := "unlimited"
	if h.cfg.DNSQPS > 0 {
		qps = strconv.Itoa(h.cfg.DNSQPS)
	}
	audit := "off"
	if h.cfg.Audit {
		audit = "on (file)"
	}
	short := func(v string) string { return firstLine(strings.SplitN(v, "  ", 2)[0]) }
	h.notes = append([]string{
		fmt.Sprintf("CONNECT targets: stockade gets %s:PORT, resolved from its --hosts file; tinyproxy gets 127.0.0.1:PORT "+
			"(it has no hosts file and /etc/hosts is not edited); direct dials 127.0.0.1:PORT.", upstreamName),
		fmt.Sprintf("DNS: stockade and dnsmasq answer from the same hosts file; queries alternate %d allowed and %d unlisted names (type A); "+
			"dnsmasq runs with no upstream, so unlisted names get REFUSED from both.", h.cfg.DNSNames, h.cfg.DNSNames),
		"CPU = utime+stime of the server process from /proc/PID/stat (10 ms ticks) over the measurement.",
	}, h.notes...)
	return []string{
		fmt.Sprintf("stockade boundary benchmark, %s, linux %s, %d CPUs, %s",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(kernel)), runtime.NumCPU(),
			strings.TrimPrefix(short(h.tools.Version["go"]), "go version ")),
		fmt.Sprintf("medians of %d run(s) x %s each; loadgen, upstream and server share the CPUs; stockade --identity %s, audit %s",
			h.cfg.Runs, h.cfg.Duration, h.cfg.Identity, audit),
		fmt.Sprintf("peers: %s, %s; dnsperf %s -c %d -T %d -q %d -Q %s",
			short(h.tools.Version["tinyproxy"]), short(h.tools.Version["dnsmasq"]), h.tools.Version["dnsperf"],
			h.cfg.DNSClients, h.cfg.DNSThreads, h.cfg.DNSOutstanding, qps),
	}
}
