package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/bench/loadgen"
	"github.com/stockade-dev/stockade/boundary/identity"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
)

// Config is one harness run.
type Config struct {
	RepoDir        string        // module root holding cmd/stockade and bench/
	Stockade       string        // prebuilt stockade binary; "" builds ./cmd/stockade
	Duration       time.Duration // of each measurement
	Runs           int           // of each measurement; the table shows medians
	Concurrency    []int         // tunnels workers, one set of rows each
	Identity       string        // stockade --identity: netlink or none
	Audit          bool          // pass stockade --audit (a file in the run dir)
	Binary         string        // policy binaries path glob
	DNSNames       int           // allowed names (as many unlisted ones are queried)
	DNSClients     int           // dnsperf -c
	DNSThreads     int           // dnsperf -T
	DNSOutstanding int           // dnsperf -q
	DNSQPS         int           // dnsperf -Q; 0 = as fast as answered
	BenchTime      string        // go test -benchtime
	BenchCount     int           // go test -count (the table shows medians)
	BenchPkgs      []string      // packages whose Go benchmarks join the table
	StockadeArgs   []string      // extra arguments for `stockade boundary serve`
	Sandbox        bool          // measure the sandbox system too (a gateway and a sandbox; needs root)
	HoldTunnels    int           // tunnels held open for the RSS rows (<= the boundary's --max-conns, 1024)
	HoldFor        time.Duration // how long they are held
	Keep           bool          // keep the run dir (configs, logs)
	Log            zerolog.Logger
}

// DefaultConfig is the full `make bench` configuration.
func DefaultConfig() Config {
	return Config{
		// Ten rounds of 3 s, not three of 10 s: the same time per system,
		// and medians this machine's drift moves less (docs/bench-history.md,
		// "make bench on ... (stop 31)").
		RepoDir: ".", Duration: 3 * time.Second, Runs: 10, Concurrency: []int{1, 16, 64},
		Identity: "netlink", Audit: true, Binary: "/**", DNSNames: 100,
		DNSClients: 4, DNSThreads: 1, DNSOutstanding: 100, BenchTime: "1s", BenchCount: 3,
		Sandbox: true, HoldTunnels: 1000, HoldFor: 5 * time.Second,
		BenchPkgs: []string{"./policy/", "./boundary/identity/", "./client/", "./cmd/stockade/", "./e2e/"}, Log: zerolog.Nop(),
	}
}

// Quick turns c into a smoke-test configuration: 2 s measurements, 1 run,
// tunnels held 3 s.
func (c Config) Quick() Config {
	c.Duration, c.Runs, c.BenchTime, c.BenchCount, c.HoldFor = 2*time.Second, 1, "100ms", 1, 3*time.Second
	return c
}

// system is one thing measured: stockade's standalone boundary, its
// boundary in a sandbox's supervisor, a peer, or the direct path.
type system struct {
	name  string
	srv   *server // the server process the harness started; nil for direct and the sandbox
	pid   int     // the process whose CPU and RSS are the system's (srv's, the supervisor's); 0 for direct
	proxy string  // HTTP proxy address as its clients dial it; "" for direct and DNS-only systems
	dns   string  // DNS address; "" when not a DNS server
	host  string  // host part of CONNECT targets
	why   string  // non-empty: not measured, and why
	// inSandbox: the loads run inside the harness's sandbox through
	// `stockade sandbox exec`, and only the supervisor's own CPU counts
	// (not that of the workload processes it reaps).
	inSandbox bool
	// group, when set, is the control group each of the system's loads
	// is put in as it starts (serve-cgroup: loadgroup.go).
	group cgroup.Group
}

// cpu is the CPU time the system's process has used so far (0 when there
// is none or it is gone).
func (s *system) cpu() cpuTime {
	if s.pid == 0 {
		return cpuTime{}
	}
	d, err := procCPU(s.pid, !s.inSandbox)
	if err != nil {
		return cpuTime{}
	}
	return d
}

type tunnelRun struct {
	res loadgen.TunnelResult
	cpu cpuTime
}

type dnsRun struct {
	res dnsResult
	cpu cpuTime
}

// noIdentity names the second `boundary serve`, with --identity none.
const noIdentity = "serve-noidentity"

type harness struct {
	cfg      Config
	tools    Tools
	dir      string
	srvs     *servers
	loadgen  string
	floorBin string // the gofloor binary
	echoPort int
	sinkPort int
	files    files

	stockade, sandbox, tinyproxy, dnsmasq, direct *system
	// gofloor is a minimal Go CONNECT proxy (bench/cmd/gofloor): what Go's
	// runtime and net package cost without the boundary's path. It runs
	// the tunnels and bulk loads.
	gofloor *system
	// noID is a second `boundary serve` with --identity none (actors,
	// policy and audit on): what the boundary costs without identity. It
	// runs the tunnels load.
	noID *system
	// serveCG is `boundary serve` loaded from a control group like the
	// sandbox's (loadgroup.go).
	serveCG *system
	gw      *gatewayRun // the sandbox's gateway; nil when not started

	tunnels map[string][]tunnelRun // by system/c
	bulk    map[string][]loadgen.BulkResult
	dnsRuns map[string][]dnsRun
	rss     map[string]*rssResult // by system
	failed  map[string][]string   // measurement failures by system
	notes   []string
}

// Run builds, starts, measures, stops everything and returns the report.
// Every process it started is gone when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	tools, err := CheckTools(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Runs < 1 || cfg.BenchCount < 1 || cfg.Duration <= 0 || len(cfg.Concurrency) == 0 {
		return nil, fmt.Errorf("bench config: runs %d, bench count %d, duration %s and concurrency %v must be positive", cfg.Runs, cfg.BenchCount, cfg.Duration, cfg.Concurrency)
	}
	if cfg.HoldTunnels < 0 || cfg.HoldTunnels > maxHold || (cfg.HoldTunnels > 0 && cfg.HoldFor <= 0) {
		return nil, fmt.Errorf("bench config: hold %d tunnels for %s: want 0..%d (the boundary's default --max-conns) and a positive time",
			cfg.HoldTunnels, cfg.HoldFor, maxHold)
	}
	if cfg.RepoDir, err = filepath.Abs(cfg.RepoDir); err != nil {
		return nil, fmt.Errorf("bench config: repo dir: %w", err)
	}
	dir, err := os.MkdirTemp("", "stockade-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: run dir: %w", err)
	}
	if cfg.Keep {
		cfg.Log.Info().Str("dir", dir).Msg("keeping run dir")
	} else {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	if err := os.Chmod(dir, 0o755); err != nil { // dnsmasq reads it as nobody
		return nil, fmt.Errorf("bench: run dir: %w", err)
	}
	h := &harness{
		cfg: cfg, tools: tools, dir: dir, srvs: &servers{dir: dir, log: cfg.Log},
		stockade:  &system{name: "stockade", host: upstreamName},
		sandbox:   &system{name: "sandbox", host: upstreamName, inSandbox: true},
		tinyproxy: &system{name: "tinyproxy", host: "127.0.0.1"},
		dnsmasq:   &system{name: "dnsmasq"},
		direct:    &system{name: "direct", host: "127.0.0.1"},
		gofloor:   &system{name: "gofloor", host: "127.0.0.1"},
		noID:      &system{name: noIdentity, host: upstreamName},
		serveCG:   &system{name: serveCgroup, host: upstreamName},
		tunnels:   map[string][]tunnelRun{}, bulk: map[string][]loadgen.BulkResult{},
		dnsRuns: map[string][]dnsRun{}, rss: map[string]*rssResult{}, failed: map[string][]string{},
	}
	defer h.srvs.stopAll()
	defer h.stopSandbox(ctx) // before the gateway is stopped with the rest
	defer h.stopLoadGroup()
	if err := h.setup(ctx); err != nil {
		return nil, err
	}
	h.measureIdleRSS(ctx, false)
	h.measureHeldRSS(ctx)
	h.measure(ctx)
	h.measureIdleRSS(ctx, true)
	h.stopSandbox(ctx)
	h.srvs.stopAll() // the Go benchmarks get the CPUs to themselves
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench interrupted: %w", err)
	}
	rows := h.networkRows()
	for _, pkg := range cfg.BenchPkgs {
		rows = append(rows, h.goBenchRows(ctx, pkg)...)
	}
	header := h.header()
	return &Report{Header: header, Rows: rows, Notes: h.notes}, ctx.Err()
}

func (h *harness) note(format string, args ...any) {
	h.notes = append(h.notes, fmt.Sprintf(format, args...))
}

func (h *harness) setup(ctx context.Context) error {
	stockadeBin, err := h.build(ctx)
	if err != nil {
		return err
	}
	if err := h.startUpstream(ctx, 4*time.Hour); err != nil {
		return err
	}
	ports := make([]int, 7)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	tpPort, dmPort, skProxy, skDNS, gfPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	noIDProxy, noIDDNS := ports[5], ports[6]
	h.files, err = writeFiles(fileParams{
		dir: h.dir, names: h.cfg.DNSNames, echoPort: h.echoPort, sinkPort: h.sinkPort,
		binary: h.cfg.Binary, tinyproxyPort: tpPort,
	})
	if err != nil {
		return err
	}
	h.tinyproxy.proxy = fmt.Sprintf("127.0.0.1:%d", tpPort)
	h.startServer(ctx, h.tinyproxy, h.tools.Path["tinyproxy"], "-d", "-c", h.files.tinyproxy)
	h.dnsmasq.dns = fmt.Sprintf("127.0.0.1:%d", dmPort)
	h.startServer(ctx, h.dnsmasq, h.tools.Path["dnsmasq"], dnsmasqArgs(dmPort, h.files.hosts)...)
	h.gofloor.proxy = fmt.Sprintf("127.0.0.1:%d", gfPort)
	h.startServer(ctx, h.gofloor, h.floorBin, "-listen", h.gofloor.proxy)
	if h.stockade.why == "" {
		h.startStockade(ctx, stockadeBin, skProxy, skDNS)
	}
	switch {
	case h.stockade.why != "":
		h.noID.why = h.stockade.why
	case h.cfg.Identity == identity.ModeNone:
		h.noID.why = "stockade runs --identity none already"
	default:
		h.startNoIdentity(ctx, stockadeBin, noIDProxy, noIDDNS)
	}
	switch {
	case h.stockade.why == "not built":
		h.sandbox.why = "not built"
	case h.cfg.Sandbox:
		h.startSandbox(ctx, stockadeBin)
	default:
		h.sandbox.why = sandboxOff
	}
	h.startLoadGroup(ctx)
	if h.tinyproxy.why != "" || h.dnsmasq.why != "" {
		return fmt.Errorf("peers did not start: tinyproxy: %s; dnsmasq: %s", orOK(h.tinyproxy.why), orOK(h.dnsmasq.why))
	}
	return ctx.Err()
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return s
}

// oneLine joins the lines of s with " | ".
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' }), " | ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// build builds loadgen (static: the sandbox runs it too) and, unless
// cfg.Stockade names one, stockade. It returns the stockade binary; a
// stockade that does not build leaves h.stockade.why set.
func (h *harness) build(ctx context.Context) (string, error) {
	log := h.cfg.Log
	h.loadgen = filepath.Join(h.dir, "loadgen")
	log.Info().Msg("building loadgen")
	if _, err := runCmdEnv(ctx, h.cfg.RepoDir, []string{"CGO_ENABLED=0"}, h.tools.Path["go"], "build", "-o", h.loadgen, "./bench/cmd/loadgen"); err != nil {
		return "", fmt.Errorf("build loadgen: %w", err)
	}
	h.floorBin = filepath.Join(h.dir, "gofloor")
	if _, err := runCmd(ctx, h.cfg.RepoDir, h.tools.Path["go"], "build", "-o", h.floorBin, "./bench/cmd/gofloor"); err != nil {
		return "", fmt.Errorf("build gofloor: %w", err)
	}
	stockadeBin := h.cfg.Stockade
	if stockadeBin == "" {
		stockadeBin = filepath.Join(h.dir, "stockade")
		log.Info().Msg("building stockade")
		if _, err := runCmd(ctx, h.cfg.RepoDir, h.tools.Path["go"], "build", "-o", stockadeBin, "./cmd/stockade"); err != nil {
			h.stockade.why = "not built"
			h.note("stockade not built: %s", oneLine(err.Error()))
		}
	} else if abs, err := filepath.Abs(stockadeBin); err == nil {
		stockadeBin = abs // the gateway spawns supervisors from its own path
	}
	return stockadeBin, nil
}

// startStockade starts `stockade boundary serve` on the given ports.
func (h *harness) startStockade(ctx context.Context, bin string, proxyPort, dnsPort int) {
	h.startServe(ctx, h.stockade, bin, proxyPort, dnsPort, h.cfg.Identity, "audit.jsonl")
}

// startNoIdentity starts the second `boundary serve`: as stockade's, with
// --identity none and its own ports and audit file.
func (h *harness) startNoIdentity(ctx context.Context, bin string, proxyPort, dnsPort int) {
	h.startServe(ctx, h.noID, bin, proxyPort, dnsPort, identity.ModeNone, "audit-"+noIdentity+".jsonl")
}

// startServe starts s as `stockade boundary serve` with the bench's
// policy and hosts, the given identity mode, and (when the bench audits)
// an audit file named audit in the run dir.
func (h *harness) startServe(ctx context.Context, s *system, bin string, proxyPort, dnsPort int, mode, audit string) {
	s.proxy = fmt.Sprintf("127.0.0.1:%d", proxyPort)
	s.dns = fmt.Sprintf("127.0.0.1:%d", dnsPort)
	args := []string{"boundary", "serve", "--policy", h.files.policy, "--proxy", s.proxy,
		"--dns", s.dns, "--hosts", h.files.hosts, "--identity", mode, "--allow-loopback-upstream"}
	if h.cfg.Audit {
		args = append(args, "--audit", filepath.Join(h.dir, audit))
	}
	h.startServer(ctx, s, bin, append(args, h.cfg.StockadeArgs...)...)
}

// startUpstream runs `loadgen upstream` (it exits by itself after
// lifetime) and reads its addresses.
func (h *harness) startUpstream(ctx context.Context, lifetime time.Duration) error {
	srv, err := h.srvs.start("upstream", h.loadgen, "upstream", "-lifetime", lifetime.String())
	if err != nil {
		return err
	}
	var addrs struct{ Echo, Sink string }
	err = srv.waitFor(ctx, 10*time.Second, func() error {
		b, err := os.ReadFile(srv.log)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &addrs)
	})
	if err != nil {
		return fmt.Errorf("start upstream: %w", err)
	}
	if h.echoPort, err = port(addrs.Echo); err != nil {
		return err
	}
	h.sinkPort, err = port(addrs.Sink)
	return err
}

func port(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("upstream address %q: %w", addr, err)
	}
	return strconv.Atoi(p)
}

// startServer starts s and waits until it serves: its proxy tunnels a
// probe and its DNS answers an allowed name. A failure leaves s.why set
// and s stopped.
func (h *harness) startServer(ctx context.Context, s *system, path string, args ...string) {
	srv, err := h.srvs.start(s.name, path, args...)
	if err != nil {
		s.why = "failed to start"
		h.note("%s: %v", s.name, err)
		return
	}
	s.srv, s.pid = srv, srv.pid()
	if s.proxy != "" {
		err = srv.waitFor(ctx, 15*time.Second, dialCheck(s.proxy))
	}
	if err == nil && s.dns != "" {
		err = srv.waitFor(ctx, 15*time.Second, func() error { return h.checkDNS(s.dns) })
	}
	if err == nil && s.proxy != "" {
		err = h.probeProxy(ctx, s)
	}
	if err != nil {
		s.why = "not serving"
		h.note("%s not serving: %v", s.name, err)
		srv.stop()
		return
	}
	h.cfg.Log.Info().Str("server", s.name).Int("pid", srv.pid()).Msg("serving")
}

// checkDNS wants NOERROR with the hosts file's address for an allowed name
// and REFUSED for an unlisted one.
func (h *harness) checkDNS(addr string) error {
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	for _, q := range []struct {
		name  string
		rcode int
		ip    string
	}{{allowedName(0), dns.RcodeSuccess, allowedIP(0)}, {unlistedName(0), dns.RcodeRefused, ""}} {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(q.name), dns.TypeA)
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			return fmt.Errorf("query %s: %w", q.name, err)
		}
		if r.Rcode != q.rcode {
			return fmt.Errorf("query %s: rcode %s, want %s", q.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[q.rcode])
		}
		if q.ip != "" && (len(r.Answer) != 1 || !strings.HasSuffix(r.Answer[0].String(), "\t"+q.ip)) {
			return fmt.Errorf("query %s: answer %v, want one A %s", q.name, r.Answer, q.ip)
		}
	}
	return nil
}

// probeProxy runs a short tunnels load through s and wants no failure.
func (h *harness) probeProxy(ctx context.Context, s *system) error {
	res, err := h.runTunnels(ctx, s, 1, 200*time.Millisecond)
	if err != nil {
		return fmt.Errorf("CONNECT probe: %w", err)
	}
	if res.Tunnels == 0 || res.Errors != 0 {
		return fmt.Errorf("CONNECT probe: %d tunnels, %d errors %v, first: %s", res.Tunnels, res.Errors, res.ErrorKinds, res.FirstError)
	}
	return nil
}

func (h *harness) target(s *system, port int) string {
	return net.JoinHostPort(s.host, strconv.Itoa(port))
}

// loadgenArgs are the flags of a tunnels or bulk load through s.
func (h *harness) loadgenArgs(mode string, s *system, port int, d time.Duration) []string {
	args := []string{mode, "-target", h.target(s, port), "-d", d.String()}
	if s.proxy != "" {
		args = append(args, "-proxy", s.proxy)
	}
	return args
}

// loadgenCmd is the command that runs loadgen with args for s: the host
// binary, or `stockade sandbox exec` running the sandbox's copy (killed
// inside after d plus a margin).
func (h *harness) loadgenCmd(s *system, d time.Duration, args []string) (path string, argv []string) {
	if s.inSandbox && h.gw != nil {
		return h.gw.bin, h.gw.execArgs(d, args)
	}
	return h.loadgen, args
}

// runLoadgen runs loadgen for s, bounded to d plus a margin, and decodes
// its JSON result into out.
func (h *harness) runLoadgen(ctx context.Context, s *system, d time.Duration, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	path, argv := h.loadgenCmd(s, d, args)
	b, err := runCmdIn(ctx, h.dir, s.group, path, argv...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("loadgen %s output %q: %w", args[0], b, err)
	}
	return nil
}

func (h *harness) runTunnels(ctx context.Context, s *system, c int, d time.Duration) (loadgen.TunnelResult, error) {
	var res loadgen.TunnelResult
	args := append(h.loadgenArgs("tunnels", s, h.echoPort, d), "-c", strconv.Itoa(c))
	return res, h.runLoadgen(ctx, s, d, &res, args...)
}

func tunnelKey(s *system, c int) string { return fmt.Sprintf("%s/c=%d", s.name, c) }

// measure runs every measurement cfg.Runs times, interleaving the systems
// within each run so that drift hits all of them alike. Failures are
// recorded, not fatal.
//
// The lists put the systems a row compares next to each other (this VM's
// speed moves by a quarter within seconds), and each run starts one system
// later than the last (rotated), so that no system always follows the same
// one or always runs first.
func (h *harness) measure(ctx context.Context) {
	d := h.cfg.Duration
	// Tunnels: tinyproxy's targets for serve and the sandbox; serve, the
	// sandbox and serve with the load in a like cgroup, the same-speed rows.
	loaded := []*system{h.tinyproxy, h.stockade, h.sandbox, h.serveCG, h.direct, h.gofloor, h.noID}
	// Bulk: each of serve and the sandbox beside direct and tinyproxy.
	proxies := []*system{h.stockade, h.direct, h.sandbox, h.tinyproxy, h.gofloor}
	resolvers := []*system{h.stockade, h.dnsmasq}
	for run := 1; run <= h.cfg.Runs && ctx.Err() == nil; run++ {
		log := h.cfg.Log.With().Int("run", run).Logger()
		for _, c := range h.cfg.Concurrency {
			for _, s := range rotated(usable(loaded), run-1) {
				cpu0 := s.cpu()
				res, err := h.runTunnels(ctx, s, c, d)
				if h.failure(ctx, s, "tunnels", err) {
					continue
				}
				h.tunnels[tunnelKey(s, c)] = append(h.tunnels[tunnelKey(s, c)], tunnelRun{res: res, cpu: s.cpu().sub(cpu0)})
				log.Info().Str("system", s.name).Int("c", c).Str("tunnels/s", fmtRate(res.PerSecond)).
					Str("p50", fmtDur(float64(res.P50Ns))).Int64("errors", res.Errors).Msg("tunnels")
			}
		}
		for _, s := range rotated(usable(proxies), run-1) {
			var res loadgen.BulkResult
			err := h.runLoadgen(ctx, s, d, &res, h.loadgenArgs("bulk", s, h.sinkPort, d)...)
			if h.failure(ctx, s, "bulk", err) {
				continue
			}
			h.bulk[s.name] = append(h.bulk[s.name], res)
			log.Info().Str("system", s.name).Str("MB/s", fmtRate(res.MBps)).Str("error", res.Error).Msg("bulk")
		}
		for _, s := range rotated(usable(resolvers), run-1) {
			cpu0 := s.cpu()
			res, err := h.runDNSPerf(ctx, s)
			if h.failure(ctx, s, "dnsperf", err) {
				continue
			}
			h.dnsRuns[s.name] = append(h.dnsRuns[s.name], dnsRun{res: res, cpu: s.cpu().sub(cpu0)})
			log.Info().Str("system", s.name).Str("qps", fmtRate(res.QPS)).Int64("lost", res.Lost).
				Interface("rcodes", res.Rcodes).Msg("dnsperf")
		}
	}
}

// rotated is list started at its k-th element (k modulo its length),
// the elements before it moved to the end, as a new slice.
func rotated[T any](list []T, k int) []T {
	if len(list) == 0 {
		return nil
	}
	k %= len(list)
	return append(slices.Clone(list[k:]), list[:k]...)
}

func usable(list []*system) []*system {
	var out []*system
	for _, s := range list {
		if s.why == "" {
			out = append(out, s)
		}
	}
	return out
}

// failure records err (if any) against s and says whether there was one.
// Failures caused by the run's cancellation are not recorded.
func (h *harness) failure(ctx context.Context, s *system, what string, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil {
		return true
	}
	if s.srv != nil && s.srv.exited() {
		err = s.srv.failure(err)
		s.why = "exited"
	}
	if s.inSandbox && s.pid != 0 && !alive(s.pid) {
		err = fmt.Errorf("the supervisor (pid %d) is gone: %w", s.pid, err)
		s.why = "supervisor exited"
	}
	h.failed[s.name] = append(h.failed[s.name], what+": "+err.Error())
	h.cfg.Log.Warn().Str("system", s.name).Err(err).Msg(what + " failed")
	return true
}

func (h *harness) runDNSPerf(ctx context.Context, s *system) (dnsResult, error) {
	d := h.cfg.Duration
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	host, p, err := net.SplitHostPort(s.dns)
	if err != nil {
		return dnsResult{}, fmt.Errorf("dns address %q: %w", s.dns, err)
	}
	args := []string{"-s", host, "-p", p, "-d", h.files.queries, "-l", strconv.FormatFloat(d.Seconds(), 'f', -1, 64),
		"-c", strconv.Itoa(h.cfg.DNSClients), "-T", strconv.Itoa(h.cfg.DNSThreads), "-q", strconv.Itoa(h.cfg.DNSOutstanding)}
	if h.cfg.DNSQPS > 0 {
		args = append(args, "-Q", strconv.Itoa(h.cfg.DNSQPS))
	}
	out, err := runCmd(ctx, h.dir, h.tools.Path["dnsperf"], args...)
	if err != nil {
		return dnsResult{}, err
	}
	return parseDNSPerf(out)
}
