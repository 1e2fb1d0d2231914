package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// tunnelStats are the medians over the runs of one system at one
// concurrency, and the failures summed over them.
type tunnelStats struct {
	runs                 int
	rate, p50, p99, cpuT float64 // cpuT: server CPU ns per tunnel
	userT                float64 // the part of cpuT in user mode
	loadT                float64 // the load generator's own CPU ns per tunnel
	errors               int64
	kinds                map[string]int64
	first                string
}

func (h *harness) tunnelStats(s *system, c int) tunnelStats {
	runs := h.tunnels[tunnelKey(s, c)]
	st := tunnelStats{runs: len(runs), kinds: map[string]int64{}}
	var rate, p50, p99, cpuT, userT, loadT []float64
	for _, r := range runs {
		rate = append(rate, r.res.PerSecond)
		p50 = append(p50, float64(r.res.P50Ns))
		p99 = append(p99, float64(r.res.P99Ns))
		if r.res.Tunnels > 0 && r.cpu.total() > 0 {
			cpuT = append(cpuT, float64(r.cpu.total().Nanoseconds())/float64(r.res.Tunnels))
			userT = append(userT, float64(r.cpu.user.Nanoseconds())/float64(r.res.Tunnels))
		}
		if r.res.Tunnels > 0 && r.res.CPUNs > 0 {
			loadT = append(loadT, float64(r.res.CPUNs)/float64(r.res.Tunnels))
		}
		st.errors += r.res.Errors
		for k, n := range r.res.ErrorKinds {
			st.kinds[k] += n
		}
		if st.first == "" {
			st.first = r.res.FirstError
		}
	}
	st.rate, st.p50, st.p99, st.cpuT, st.userT, st.loadT = median(rate), median(p50), median(p99), median(cpuT), median(userT), median(loadT)
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

// tunnelTarget is the tunnels/s target at c clients, as a
// multiple of tinyproxy's, and the goal beyond it; 0 for no target.
func tunnelTarget(c int) (target, goal float64) {
	switch c {
	case 16:
		return 1.0, 1.3
	case 64:
		return 1.0, 1.5
	default:
		return 0, 0
	}
}

// Targets of the other rows (issue 15), each applied to the standalone
// boundary and to the sandbox's supervisor alike.
const (
	bulkVsTinyproxy = 3.0 // bulk MB/s through one tunnel >= 3x tinyproxy's
	bulkVsDirect    = 0.7 // and >= 0.7x a direct connection's
	dnsVsDnsmasq    = 0.6 // DNS queries/s >= 0.6x dnsmasq's (goal dnsGoal)
	dnsGoal         = 1.0
	dnsCPUVsDnsmasq = 3.0 // DNS server CPU per query <= 3x dnsmasq's
)

func (h *harness) networkRows() []Row {
	var rows []Row
	for _, c := range h.cfg.Concurrency {
		rows = append(rows, h.tunnelRows(c)...)
		rows = append(rows, h.sandboxTunnelRows(c)...)
	}
	rows = append(rows, h.bulkRows()...)
	rows = append(rows, h.sandboxBulkRows()...)
	rows = append(rows, h.dnsRows()...)
	rows = append(rows, h.memoryRows()...)
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
	}{{h.stockade, sk}, {h.sandbox, h.tunnelStats(h.sandbox, c)}, {h.tinyproxy, tp}, {h.direct, d}} {
		if x.st.errors > 0 {
			h.note("%s c=%d: %d failed tunnels over %d run(s) %v; first: %s", x.s.name, c, x.st.errors, x.st.runs, x.st.kinds, x.st.first)
		}
	}
	haveCmp := sk.runs > 0 && tp.runs > 0
	rate := Row{
		Name:     fmt.Sprintf("CONNECT tunnels/s c=%d", c),
		Stockade: cell(h.stockade, sk.runs, withErr(sk, fmtRate(sk.rate))),
		Peer:     cell(h.tinyproxy, tp.runs, withErr(tp, fmtRate(tp.rate)+" tinyproxy")),
		Direct:   cell(h.direct, d.runs, withErr(d, fmtRate(d.rate))),
		Ratio:    fmtRatio(sk.rate, tp.rate),
	}
	if t, goal := tunnelTarget(c); t > 0 {
		rate.Target = fmt.Sprintf(">= %.1fx tinyproxy (goal %.1fx)", t, goal)
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
		Stockade: cell(h.stockade, sk.runs, fmtCPU(sk)),
		Peer:     cell(h.tinyproxy, tp.runs, fmtCPU(tp)),
		Ratio:    fmtRatio(sk.cpuT, tp.cpuT),
		Target:   "<= tinyproxy's",
		Verdict:  verdict(haveCmp && sk.cpuT > 0 && tp.cpuT > 0, sk.cpuT <= tp.cpuT),
	}
	rows := []Row{rate, added, p99, cpu}
	if h.gofloor != nil && h.gofloor.why == "" {
		rows = append(rows, h.floorRow(c, sk, tp))
	}
	if h.noID != nil && h.noID.why == "" {
		rows = append(rows, h.noIdentityRow(c, sk, tp))
	}
	return rows
}

// noIdentityRow compares the boundary's CPU per tunnel with the same
// boundary's without identity (--identity none: actors, policy and audit
// still on), and that with tinyproxy's: what exact identity costs.
func (h *harness) noIdentityRow(c int, sk, tp tunnelStats) Row {
	return h.baseRow(c, sk, tp, h.noID, "the boundary without identity", "--identity none", "without identity")
}

// floorRow compares the boundary's CPU per tunnel with gofloor's (a
// minimal Go CONNECT proxy: bench/cmd/gofloor), and gofloor's with
// tinyproxy's: what the boundary's own path costs, and what Go's runtime
// and net package cost against a C proxy.
func (h *harness) floorRow(c int, sk, tp tunnelStats) Row {
	return h.baseRow(c, sk, tp, h.gofloor, "the Go floor", "gofloor", "gofloor")
}

// baseRow compares the boundary's CPU per tunnel with base's, then base's
// with tinyproxy's. No target: it explains the CPU row. vs ends the row's
// name, label follows base's CPU in its cell, ratioName names base in the
// ratio.
func (h *harness) baseRow(c int, sk, tp tunnelStats, base *system, vs, label, ratioName string) Row {
	b := h.tunnelStats(base, c)
	if b.errors > 0 {
		h.note("%s c=%d: %d failed tunnels over %d run(s) %v; first: %s", base.name, c, b.errors, b.runs, b.kinds, b.first)
	}
	r := Row{
		Name:     fmt.Sprintf("server CPU per tunnel c=%d vs %s", c, vs),
		Stockade: cell(h.stockade, sk.runs, fmtCPU(sk)),
		Peer:     cell(base, b.runs, withErr(b, fmtCPU(b)+" "+label+" at "+fmtRate(b.rate)+"/s")),
		Ratio:    fmtRatio(sk.cpuT, b.cpuT),
	}
	if r.Ratio != "" && tp.runs > 0 && tp.cpuT > 0 {
		r.Ratio += fmt.Sprintf(" (%s/tinyproxy %.2fx)", ratioName, b.cpuT/tp.cpuT)
	}
	return r
}

// fmtCPU is a CPU-per-tunnel cell: the total, then the part in user mode
// (the rest is the kernel's work for the process's system calls).
func fmtCPU(st tunnelStats) string {
	return fmtDur(st.cpuT) + " (user " + fmtDur(st.userT) + ")"
}

// withErr appends a tunnels figure's failure count, if any.
func withErr(st tunnelStats, v string) string {
	if st.errors > 0 {
		return fmt.Sprintf("%s (%d err)", v, st.errors)
	}
	return v
}

// sandboxPeer is the peer cell of a sandbox row: tinyproxy's figure and
// the standalone boundary's (`boundary serve`), either "-" when missing.
func (h *harness) sandboxPeer(tpRuns int, tp string, skRuns int, sk string) string {
	return cell(h.tinyproxy, tpRuns, tp+" tinyproxy") + ", " + cell(h.stockade, skRuns, sk+" serve")
}

// pairRatio is the ratio cell of a sandbox row: sandbox/tinyproxy, then
// sandbox/serve ("-" for one that cannot be computed).
func pairRatio(sb, tp, sk float64) string {
	a, b := fmtRatio(sb, tp), fmtRatio(sb, sk)
	if a == "" && b == "" {
		return ""
	}
	return orDash(a) + " / " + orDash(b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sandboxTunnelRows are the tunnels rows of the boundary in a sandbox's
// supervisor, loaded from inside the sandbox, against tinyproxy (the
// targets) and the standalone boundary (the same speed is the goal).
func (h *harness) sandboxTunnelRows(c int) []Row {
	if h.sandbox.why == sandboxOff {
		return nil
	}
	sb, sk, tp, d := h.tunnelStats(h.sandbox, c), h.tunnelStats(h.stockade, c), h.tunnelStats(h.tinyproxy, c), h.tunnelStats(h.direct, c)
	haveCmp := sb.runs > 0 && tp.runs > 0
	rate := Row{
		Name:     fmt.Sprintf("sandbox CONNECT tunnels/s c=%d", c),
		Stockade: cell(h.sandbox, sb.runs, withErr(sb, fmtRate(sb.rate))),
		Peer:     h.sandboxPeer(tp.runs, fmtRate(tp.rate), sk.runs, fmtRate(sk.rate)),
		Direct:   cell(h.direct, d.runs, fmtRate(d.rate)),
		Ratio:    pairRatio(sb.rate, tp.rate, sk.rate),
	}
	if t, goal := tunnelTarget(c); t > 0 {
		rate.Target = fmt.Sprintf(">= %.1fx tinyproxy (goal %.1fx)", t, goal)
		rate.Verdict = verdict(haveCmp, sb.rate >= t*tp.rate && sb.errors == 0)
	}
	sbAdd, tpAdd, skAdd := sb.p50-d.p50, tp.p50-d.p50, sk.p50-d.p50
	haveAdd := haveCmp && d.runs > 0
	added := Row{
		Name:     fmt.Sprintf("sandbox tunnel p50 added vs direct c=%d", c),
		Stockade: cell(h.sandbox, sb.runs*d.runs, "+"+fmtDur(sbAdd)),
		Peer:     h.sandboxPeer(tp.runs*d.runs, "+"+fmtDur(tpAdd), sk.runs*d.runs, "+"+fmtDur(skAdd)),
		Direct:   cell(h.direct, d.runs, "p50 "+fmtDur(d.p50)),
		Target:   "<= tinyproxy's",
		Verdict:  verdict(haveAdd, sbAdd <= tpAdd),
	}
	if haveAdd {
		added.Ratio = pairRatio(sbAdd, tpAdd, skAdd)
	}
	cpu := Row{
		Name:     fmt.Sprintf("sandbox supervisor CPU per tunnel c=%d", c),
		Stockade: cell(h.sandbox, sb.runs, fmtCPU(sb)),
		Peer:     h.sandboxPeer(tp.runs, fmtCPU(tp), sk.runs, fmtCPU(sk)),
		Ratio:    pairRatio(sb.cpuT, tp.cpuT, sk.cpuT),
		Target:   "<= tinyproxy's",
		Verdict:  verdict(haveCmp && sb.cpuT > 0 && tp.cpuT > 0, sb.cpuT <= tp.cpuT),
	}
	return append([]Row{rate, added, cpu}, h.sameLoadRows(c, sb, sk)...)
}

// sameSpeed is how far the supervisor's boundary may be from `boundary
// serve`'s, both loaded from a control group, and still count as the same
// speed: the spread of one system's figures between runs on this machine.
const sameSpeed = 0.10

// sameLoadRows compare the supervisor's boundary with `boundary serve`
// loaded from a control group like the sandbox's (loadgroup.go), and show
// what the load generator itself spent per tunnel in each place.
func (h *harness) sameLoadRows(c int, sb, sk tunnelStats) []Row {
	cg := h.tunnelStats(h.serveCG, c)
	have := sb.runs > 0 && cg.runs > 0 && sb.cpuT > 0 && cg.cpuT > 0
	same := Row{
		Name:     fmt.Sprintf("sandbox vs serve, the load in a like cgroup c=%d", c),
		Stockade: cell(h.sandbox, sb.runs, withErr(sb, fmtRate(sb.rate)+"/s, "+fmtCPU(sb))),
		Peer:     cell(h.serveCG, cg.runs, withErr(cg, fmtRate(cg.rate)+"/s, "+fmtCPU(cg)+" "+serveCgroup)),
		Target:   fmt.Sprintf("rate >= %.1fx, CPU <= %.1fx serve's", 1-sameSpeed, 1+sameSpeed),
		Verdict:  verdict(have, sb.rate >= (1-sameSpeed)*cg.rate && sb.cpuT <= (1+sameSpeed)*cg.cpuT && sb.errors == 0),
	}
	if have {
		same.Ratio = fmt.Sprintf("rate %s, CPU %s", fmtRatio(sb.rate, cg.rate), fmtRatio(sb.cpuT, cg.cpuT))
	}
	load := Row{
		Name:     fmt.Sprintf("load generator CPU per tunnel c=%d", c),
		Stockade: cell(h.sandbox, sb.runs, fmtDur(sb.loadT)+" in the sandbox"),
		Peer: cell(h.stockade, sk.runs, fmtDur(sk.loadT)+" serve's") + ", " +
			cell(h.serveCG, cg.runs, fmtDur(cg.loadT)+" "+serveCgroup+"'s"),
		Ratio: fmtRatio(sb.loadT, sk.loadT),
	}
	return []Row{same, load}
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
	rows := []Row{{
		Name: "bulk MB/s, 1 tunnel", Stockade: skCell,
		Peer:   cell(h.tinyproxy, tpN, fmtRate(tp)+" tinyproxy"),
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sk, tp), Target: fmt.Sprintf(">= %gx tinyproxy", bulkVsTinyproxy),
		Verdict: verdict(skN > 0 && tpN > 0, sk >= bulkVsTinyproxy*tp),
	}, {
		Name: "bulk MB/s vs direct", Stockade: skCell,
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sk, d), Target: fmt.Sprintf(">= %gx direct", bulkVsDirect),
		Verdict: verdict(skN > 0 && dN > 0, sk >= bulkVsDirect*d),
	}}
	if h.gofloor != nil && h.gofloor.why == "" {
		rows = append(rows, h.floorBulkRow(skCell, sk, d, dN))
	}
	return rows
}

// floorBulkRow compares the boundary's bulk rate with gofloor's, and
// gofloor's with direct: what one tunnel through a Go splice relay gets at
// best on this machine. No target: it explains the row against direct.
func (h *harness) floorBulkRow(skCell string, sk, d float64, dN int) Row {
	gf, gfN := h.bulkMBps(h.gofloor)
	r := Row{
		Name: "bulk MB/s vs the Go floor", Stockade: skCell,
		Peer:   cell(h.gofloor, gfN, fmtRate(gf)+" gofloor"),
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sk, gf),
	}
	if r.Ratio != "" && dN > 0 && d > 0 {
		r.Ratio += fmt.Sprintf(" (gofloor/direct %.2fx)", gf/d)
	}
	return r
}

// sandboxBulkRows are the bulk rows of the sandbox's supervisor.
func (h *harness) sandboxBulkRows() []Row {
	if h.sandbox.why == sandboxOff {
		return nil
	}
	sb, sbN := h.bulkMBps(h.sandbox)
	sk, skN := h.bulkMBps(h.stockade)
	tp, tpN := h.bulkMBps(h.tinyproxy)
	d, dN := h.bulkMBps(h.direct)
	sbCell := cell(h.sandbox, sbN, fmtRate(sb))
	return []Row{{
		Name: "sandbox bulk MB/s, 1 tunnel", Stockade: sbCell,
		Peer:   h.sandboxPeer(tpN, fmtRate(tp), skN, fmtRate(sk)),
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  pairRatio(sb, tp, sk), Target: fmt.Sprintf(">= %gx tinyproxy", bulkVsTinyproxy),
		Verdict: verdict(sbN > 0 && tpN > 0, sb >= bulkVsTinyproxy*tp),
	}, {
		Name: "sandbox bulk MB/s vs direct", Stockade: sbCell,
		Direct: cell(h.direct, dN, fmtRate(d)),
		Ratio:  fmtRatio(sb, d), Target: fmt.Sprintf(">= %gx direct", bulkVsDirect),
		Verdict: verdict(sbN > 0 && dN > 0, sb >= bulkVsDirect*d),
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
			cpuQ = append(cpuQ, float64(r.cpu.total().Nanoseconds())/float64(r.res.Completed))
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
		Ratio: fmtRatio(sk.qps, dm.qps), Target: fmt.Sprintf(">= %.1fx dnsmasq (goal %.1fx)", dnsVsDnsmasq, dnsGoal),
		Verdict: verdict(have, sk.qps >= dnsVsDnsmasq*dm.qps),
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
		Ratio: fmtRatio(sk.cpuQ, dm.cpuQ), Target: fmt.Sprintf("<= %gx dnsmasq", dnsCPUVsDnsmasq),
		Verdict: verdict(have && dm.cpuQ > 0, sk.cpuQ <= dnsCPUVsDnsmasq*dm.cpuQ),
	}}
}

// rssCells are the idle and held cells of one system's memory rows;
// suffix names the peer ("" for the row's own system).
func (h *harness) rssCells(s *system, suffix string) (idle, held string) {
	r := h.rss[s.name]
	if r == nil {
		r = &rssResult{}
	}
	have := func(v int64) int {
		if v > 0 {
			return 1
		}
		return 0
	}
	idleV := fmtBytes(float64(r.idle)) + suffix
	if r.idleAnon > 0 {
		idleV += " (anon " + fmtBytes(float64(r.idleAnon)) + ")"
	}
	if r.after > 0 {
		idleV += ", " + fmtBytes(float64(r.after)) + " after the runs"
	}
	idle = cell(s, have(r.idle), idleV)
	heldV := fmtBytes(float64(r.held)) + suffix
	if r.haveHold {
		heldV += fmt.Sprintf(" (%d/%d open", r.hold.Established, r.hold.Requested)
		if per, ok := r.perTunnel(); ok {
			heldV += ", " + fmtBytes(per) + "/tunnel"
		}
		heldV += ")"
	}
	held = cell(s, have(r.held), heldV)
	return idle, held
}

// memoryRows report the RSS of the standalone boundary and of the
// sandbox's supervisor (the whole process: session, relay, boundary),
// idle and with cfg.HoldTunnels tunnels open, tinyproxy's beside them. They
// have no target: the issue asks for the figures.
func (h *harness) memoryRows() []Row {
	for _, s := range []*system{h.stockade, h.sandbox, h.tinyproxy} {
		if r := h.rss[s.name]; r != nil {
			for _, e := range r.errs {
				h.note("%s RSS: %s", s.name, e)
			}
			if r.haveHold && (r.hold.Established < r.hold.Requested || r.hold.Alive < r.hold.Established) {
				h.note("%s hold: %d of %d tunnels opened, %d still alive at the end; %d errors %v, first: %s",
					s.name, r.hold.Established, r.hold.Requested, r.hold.Alive, r.hold.Errors, r.hold.ErrorKinds, r.hold.FirstError)
			}
		}
	}
	n := h.cfg.HoldTunnels
	skIdle, skHeld := h.rssCells(h.stockade, "")
	tpIdle, tpHeld := h.rssCells(h.tinyproxy, " tinyproxy")
	rows := []Row{
		{Name: "boundary serve RSS idle", Stockade: skIdle, Peer: tpIdle},
		{Name: fmt.Sprintf("boundary serve RSS, %d tunnels open", n), Stockade: skHeld, Peer: tpHeld},
	}
	if h.sandbox.why != sandboxOff {
		sbIdle, sbHeld := h.rssCells(h.sandbox, "")
		rows = append(rows,
			Row{Name: "sandbox supervisor RSS idle", Stockade: sbIdle, Peer: tpIdle},
			Row{Name: fmt.Sprintf("sandbox supervisor RSS, %d tunnels open", n), Stockade: sbHeld, Peer: tpHeld})
	}
	if n == 0 {
		rows = slices.DeleteFunc(rows, func(r Row) bool { return strings.Contains(r.Name, "tunnels open") })
	}
	return rows
}

// benchTarget is the target for a Go benchmark, by package and
// name: a policy decision's p99 at 1,000 endpoints (cached or not), the
// identity socket step's p99 at 200, 2,000 or 18,000 sockets. Baselines (the /proc/net/tcp scan stockade avoids)
// and other benchmarks are shown without a target. Names are read
// loosely, as benchmarks get renamed: "Decide1000EndpointsCached",
// "Decide/endpoints=1000/cache=on" and "Decide/1000/warm" are all the
// cached case; "uncached", "nocache", "cache=off", "cold" and "miss" say
// uncached.
func benchTarget(pkg, name string) (maxNs float64, label string) {
	n := strings.ToLower(name)
	has := func(subs ...string) bool {
		return slices.ContainsFunc(subs, func(s string) bool { return strings.Contains(n, s) })
	}
	tokens := strings.FieldsFunc(n, func(r rune) bool { return strings.ContainsRune("/=_-", r) })
	socketCount := slices.ContainsFunc(tokens, func(t string) bool { return t == "200" || t == "2000" || t == "18000" })
	token := func(words ...string) bool {
		return slices.ContainsFunc(tokens, func(t string) bool { return slices.Contains(words, t) })
	}
	uncached := has("uncached", "nocache", "no_cache", "no-cache", "cache=off", "cache=false") || token("cold", "miss")
	cached := !uncached && (has("cached", "cache=on", "cache=true") || token("warm", "hit"))
	switch {
	case strings.Contains(pkg, "policy") && hasNumber(n, "1000") && cached:
		return 1e3, "p99 <= 1µs"
	case strings.Contains(pkg, "policy") && hasNumber(n, "1000") && has("decide", "decision", "eval"):
		return 20e3, "p99 <= 20µs"
	case strings.Contains(pkg, "identity") && socketCount && !has("proc_net", "procnet", "proc-net"):
		return 10e3, "p99 <= 10µs"
	}
	return 0, ""
}

// hasNumber says whether s holds num as a whole number (no digit on
// either side): "decide1000endpoints" has 1000, "decide10000" has not.
func hasNumber(s, num string) bool {
	digit := func(b byte) bool { return b >= '0' && b <= '9' }
	for i := 0; ; {
		j := strings.Index(s[i:], num)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(num)
		if (j == 0 || !digit(s[j-1])) && (end == len(s) || !digit(s[end])) {
			return true
		}
		i = j + 1
	}
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
		"-benchtime", h.cfg.BenchTime, "-count", strconv.Itoa(h.cfg.BenchCount), "-timeout", "15m", pkg)
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
			case isDurationUnit(u):
				label, scale, _ := durationUnit(u)
				parts = append(parts, label+" "+fmtDur(v*scale))
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

// isDurationUnit says whether u is a custom duration metric (durationUnit).
func isDurationUnit(u string) bool {
	_, _, ok := durationUnit(u)
	return ok
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
	fixed := []string{
		fmt.Sprintf("CONNECT targets: stockade gets %s:PORT, resolved from its --hosts file; tinyproxy gets 127.0.0.1:PORT "+
			"(it has no hosts file and /etc/hosts is not edited); direct dials 127.0.0.1:PORT.", upstreamName),
		fmt.Sprintf("DNS: stockade and dnsmasq answer from the same hosts file; queries alternate %d allowed and %d unlisted names (type A); "+
			"dnsmasq runs with no upstream, so unlisted names get REFUSED from both.", h.cfg.DNSNames, h.cfg.DNSNames),
		"CPU = utime+stime of the server process from /proc/PID/stat (10 ms ticks) over the measurement; " +
			"\"(user X)\" is the utime part (the process's own code; the rest, stime, is the kernel's work for its system calls).",
		"Go floor rows: gofloor (bench/cmd/gofloor) is a CONNECT proxy in Go with nothing of the boundary's path (no identity, " +
			"policy, actors or audit; a goroutine per connection, net's splice relays), run in the same rounds to 127.0.0.1:PORT; " +
			"ratio: stockade/gofloor, then gofloor/tinyproxy (CPU) or gofloor/direct (bulk).",
	}
	if h.noID != nil && h.noID.why == "" {
		fixed = append(fixed, fmt.Sprintf("without identity rows: %s is a second `boundary serve` of the same binary with --identity none "+
			"(actors, policy, audit as stockade's), run in the same rounds; ratio: stockade/%s (what exact identity costs), "+
			"then %s/tinyproxy.", noIdentity, noIdentity, noIdentity))
	}
	if h.sandbox.why != sandboxOff {
		fixed = append(fixed, fmt.Sprintf("sandbox rows: a gateway (`stockade gateway run`, its own state dir, --allow-loopback-upstream, --hosts as above) "+
			"and one sandbox %q under the same policy; loadgen (static) is copied into its workspace and runs inside via "+
			"`stockade sandbox exec %s -- %s ...`, through the supervisor's boundary at %s (what the workload's HTTPS_PROXY names), "+
			"to %s:PORT. CPU = the supervisor's own utime+stime (boundary, session, relay; the exec session's start, a few ms per run, "+
			"included; the workload's not). Peer cells: tinyproxy, then `boundary serve`; ratio: sandbox/tinyproxy / sandbox/serve. "+
			"The supervisor's boundary always runs identity netlink and an audit file.",
			sandboxName, sandboxName, sandboxLoadgen, sandboxProxy, upstreamName))
		fixed = append(fixed, fmt.Sprintf("%s: `boundary serve` (the same process as stockade's rows) loaded by a host loadgen put in a control group "+
			"of its own, made as a sandbox's is (every controller, the sandbox's limits), in the same rounds: the sandbox's load runs in its cgroup, "+
			"scheduled as one group and paying the group's accounting, so \"sandbox vs serve, the load in a like cgroup\" compares the two "+
			"boundaries under the same load (same speed: rate >= %.1fx and CPU <= %.1fx). load generator CPU = loadgen's own utime+stime "+
			"per tunnel (getrusage); ratio: in the sandbox / serve's.", serveCgroup, 1-sameSpeed, 1+sameSpeed))
	}
	if h.cfg.HoldTunnels > 0 {
		fixed = append(fixed, fmt.Sprintf("RSS = VmRSS of the process (the whole supervisor for the sandbox): idle after %s without load "+
			"(only the start-up probe served), and again %s after the throughput runs; open = while `loadgen hold` keeps %d tunnels open "+
			"(opened 16 at a time, each proved by an echo; read %s after the last one), right after the first idle reading, "+
			"before the throughput runs; per tunnel = (open - idle) / tunnels open. anon = Anonymous of /proc/PID/smaps_rollup when idle: "+
			"the process's heap and stacks, what each more supervisor costs (the rest of RSS is the binary's pages, shared by every process running it).",
			idleQuiet, idleQuiet, h.cfg.HoldTunnels, min(time.Second, h.cfg.HoldFor/2)))
	}
	h.notes = append(fixed, h.notes...)
	return []string{
		fmt.Sprintf("stockade boundary benchmark, %s, linux %s, %d CPUs, %s",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(kernel)), runtime.NumCPU(),
			strings.TrimPrefix(short(h.tools.Version["go"]), "go version ")),
		fmt.Sprintf("medians of %d run(s) x %s each, the systems in turn within a run, each run starting one system later; "+
			"loadgen, upstream and server share the CPUs, each process in a session of its own "+
			"(autogroup %s); stockade --identity %s, audit %s",
			h.cfg.Runs, h.cfg.Duration, autogroup("/proc/sys/kernel/sched_autogroup_enabled", "/proc/self/cgroup"), h.cfg.Identity, audit),
		fmt.Sprintf("peers: %s, %s; dnsperf %s -c %d -T %d -q %d -Q %s",
			short(h.tools.Version["tinyproxy"]), short(h.tools.Version["dnsmasq"]), h.tools.Version["dnsperf"],
			h.cfg.DNSClients, h.cfg.DNSThreads, h.cfg.DNSOutstanding, qps),
	}
}

// autogroup says whether the kernel schedules each session as a group of
// its own, which is what starting every process in its own session
// changes: enabled is /proc/sys/kernel/sched_autogroup_enabled, cgroups
// /proc/self/cgroup. Autogroup applies only to tasks of the root cpu
// cgroup, so "on" needs the harness (and what it starts) there.
func autogroup(enabled, cgroups string) string {
	b, err := os.ReadFile(enabled)
	switch v := strings.TrimSpace(string(b)); {
	case errors.Is(err, fs.ErrNotExist):
		return "not in this kernel"
	case err != nil:
		return "unknown: " + err.Error()
	case v == "0":
		return "off"
	}
	path, err := cgroup.CPUGroupOf(cgroups)
	if err != nil {
		return "on; the harness's cpu cgroup unknown: " + err.Error()
	}
	if path != "" && path != "/" {
		return "on, but the harness is in cpu cgroup " + path + ", where it does not apply"
	}
	return "on"
}
