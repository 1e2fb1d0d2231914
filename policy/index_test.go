package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade-dev/stockade/policy/reason"
)

// The decision index must answer exactly as OPA on every input: these
// tests decide the same generated inputs with two engines over the same
// policy, one with the index and one without (OPA alone), and compare
// every field of every Decision.
//
// The seed is random per run and printed; POLICY_INDEX_SEED=<n> replays a
// run, POLICY_INDEX_INPUTS=<n> asks n inputs of each policy (default 200;
// 40 under -race or -short).

// indexSeed returns the generator seed: POLICY_INDEX_SEED, or the clock.
func indexSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("POLICY_INDEX_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("POLICY_INDEX_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// diffPolicy is a policy of the differential test, with query material
// taken from where it came from (the compat table's queries).
type diffPolicy struct {
	name  string
	src   []byte
	hosts []string
	exes  []string
}

// diffInput is one decision asked of both engines.
type diffInput struct {
	dns bool
	net NetworkInput
	dq  DNSInput
}

func (in diffInput) String() string {
	if in.dns {
		return fmt.Sprintf("DNS %q qtype %d", in.dq.Name, in.dq.QType)
	}
	return fmt.Sprintf("network host=%q port=%d exe=%q ancestors=%q identityNone=%v",
		in.net.Host, in.net.Port, in.net.Exe, in.net.Ancestors, in.net.IdentityNone)
}

// diffTally counts what the generated inputs exercised, so a generator
// that stopped reaching a kind of decision fails the test.
type diffTally struct {
	inputs, dnsInputs                    int
	allowExe, allowNone, binDeny, epDeny int
	dnsAllow, dnsDeny, ips, exact        int
	multiIPs, named, wildAllow           int
}

func (c *diffTally) add(in diffInput, d Decision, pol *Policy) {
	if in.dns {
		c.dnsInputs++
		if d.Allow {
			c.dnsAllow++
		} else if d.Reason == reason.PolicyDNSIneligible {
			c.dnsDeny++
		}
		return
	}
	c.inputs++
	switch {
	case d.Allow && in.net.IdentityNone:
		c.allowNone++
	case d.Allow:
		c.allowExe++
	case d.Reason == reason.BinaryNotAllowed:
		c.binDeny++
	case d.Reason == reason.EndpointNotAllowed:
		c.epDeny++
	}
	if len(d.AllowedIPs) > 0 {
		c.ips++
	}
	if len(d.AllowedIPs) > 1 {
		c.multiIPs++
	}
	if d.ExactHost {
		c.exact++
	}
	if d.PolicyName != "" {
		c.named++
	}
	if d.Allow && !d.ExactHost && hasPattern(pol) {
		c.wildAllow++
	}
}

func hasPattern(p *Policy) bool {
	for _, np := range p.NetworkPolicies {
		for _, ep := range np.Endpoints {
			if ep.Wildcard {
				return true
			}
		}
	}
	return false
}

// diffEngines loads src into an engine with the index and one without
// (OPA alone, uncached). The index's engine has a small decision cache:
// an input seen before may be answered from it (the generators repeat
// inputs), after evictions and promotions, and must still be OPA's answer.
func diffEngines(name string, src []byte) (*diffSet, error) {
	pol, err := Parse(name, src)
	if err != nil {
		return nil, err
	}
	d := &diffSet{
		indexed: NewEngine(WithCacheSize(16)),
		opa:     NewEngine(WithCacheSize(0), withoutIndex()),
	}
	for _, e := range []*Engine{d.indexed, d.opa} {
		if _, err := e.install(pol, 0); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// diffSet is the engines one policy is decided with.
type diffSet struct {
	indexed, opa *Engine
}

// compare decides in on both engines and describes every field where the
// index (or the cache in front of it) differs from OPA ("" when they
// agree).
func (s *diffSet) compare(ctx context.Context, in diffInput) (Decision, string) {
	decide := func(e *Engine) Decision {
		if in.dns {
			return e.DecideDNS(ctx, in.dq)
		}
		// Each engine gets its own copy: a decision must not depend on or
		// change the caller's slice.
		n := in.net
		n.Ancestors = slices.Clone(n.Ancestors)
		return e.DecideNetwork(ctx, n)
	}
	want, got := decide(s.opa), decide(s.indexed)
	if reflect.DeepEqual(got, want) {
		return want, ""
	}
	var diffs []string
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < gv.NumField(); i++ {
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s: index %#v, OPA %#v", gv.Type().Field(i).Name, g, w))
		}
	}
	return want, strings.Join(diffs, "; ")
}

// runDiff decides n generated inputs for one policy on both engines and
// returns the disagreements (at most max).
func runDiff(t *testing.T, r *rand.Rand, p diffPolicy, set *diffSet, n, max int, tally *diffTally) []string {
	t.Helper()
	ctx := context.Background()
	pol, _ := set.opa.Current()
	gen := newInputGen(r, pol, p)
	m := set.indexed.cur.Load().index.matcher
	var bad []string
	for i := 0; i < n && len(bad) < max; i++ {
		in := gen.next()
		// The pattern index both sides use (stockade.host_entries and
		// host_key), against trying every pattern.
		name := normalizeName(in.net.Host)
		if in.dns {
			name = normalizeName(in.dq.Name)
		}
		if got, want := m.matching(name), matchingByScan(m, name); !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("%s: host patterns matching %q: indexed %v, by scan %v", p.name, name, got, want))
			continue
		}
		d, diff := set.compare(ctx, in)
		if diff != "" {
			bad = append(bad, fmt.Sprintf("%s: %s\n    %s", p.name, in, diff))
			continue
		}
		if tally != nil {
			tally.add(in, d, pol)
		}
	}
	return bad
}

// matchingByScan is hostMatcher.matching without its suffix and tail
// filters: every pattern group, tried in order.
func matchingByScan(m *hostMatcher, host string) []int {
	var out []int
	for i, g := range m.groups {
		if g.pat.match(host) {
			out = append(out, i)
		}
	}
	return out
}

// TestIndexAgreesWithOPA is the randomized differential test: every
// policy under testdata/compat, every loadable policy of the compat
// table, the engine and benchmark test policies and generated synthetic
// policies; for each, generated inputs that match, nearly match, differ in
// case or trailing dots, ports in and out, executables matching and
// missing the binaries (exact and glob, directly and through ancestors),
// identity none, and DNS names.
func TestIndexAgreesWithOPA(t *testing.T) {
	seed := indexSeed(t)
	t.Logf("seed %d (replay with POLICY_INDEX_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	perPolicy, synthetic := 200, 80
	if testing.Short() || raceEnabled {
		perPolicy, synthetic = 40, 30
	}
	if s := os.Getenv("POLICY_INDEX_INPUTS"); s != "" { // a longer run
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("POLICY_INDEX_INPUTS=%q: want a positive number of inputs per policy", s)
		}
		perPolicy, synthetic = n, max(synthetic, n/5)
	}
	var policies []diffPolicy
	files, err := filepath.Glob("testdata/compat/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("compat policies: %v (%d files)", err, len(files))
	}
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(data)] = true
		policies = append(policies, diffPolicy{name: filepath.Base(f), src: data})
	}
	compatRows := 0
	for _, row := range compatTable() {
		if row.reject != "" {
			continue
		}
		src := []byte(row.yaml)
		if row.file != "" {
			src = compatFile(t, row.file)
		}
		p := diffPolicy{name: "compat row " + row.source, src: src}
		for _, q := range row.queries {
			p.hosts = append(p.hosts, q.host)
			p.exes = append(p.exes, q.exe)
			p.exes = append(p.exes, q.ancestors...)
		}
		if seen[string(src)] { // the same policy: keep its queries' material
			for i := range policies {
				if string(policies[i].src) == string(src) {
					policies[i].hosts = append(policies[i].hosts, p.hosts...)
					policies[i].exes = append(policies[i].exes, p.exes...)
				}
			}
			continue
		}
		seen[string(src)] = true
		compatRows++
		policies = append(policies, p)
	}
	// The benchmarks' policies, smaller: validating 1,000 endpoints (the
	// pairwise ambiguity check) takes seconds, and the index code is the
	// same at any size.
	patterns, _ := patternPolicyN(120)
	policies = append(policies,
		diffPolicy{name: "semanticsPolicy", src: []byte(semanticsPolicy)},
		diffPolicy{name: "syntheticPolicy(10)", src: syntheticPolicy(10)},
		diffPolicy{name: "syntheticPolicy(200)", src: syntheticPolicy(200)},
		diffPolicy{name: "patternPolicyN(120)", src: patterns},
		diffPolicy{name: "hostpattern_test patternPolicy", src: []byte(patternPolicy)},
	)
	fixed := len(policies)
	t.Logf("%d compat files, %d more compat-table policies, %d test policies, %d synthetic",
		len(files), compatRows, fixed-len(files)-compatRows, synthetic)

	var tally diffTally
	var bad []string
	check := func(p diffPolicy, set *diffSet) {
		if s := set.indexed.cur.Load(); s.index == nil {
			t.Errorf("%s: no decision index (%v): OPA would decide alone", p.name, s.indexErr)
			return
		}
		if s := set.opa.cur.Load(); s.index != nil {
			t.Fatalf("%s: the reference engine has an index", p.name)
		}
		bad = append(bad, runDiff(t, r, p, set, perPolicy, 10-len(bad), &tally)...)
	}
	for _, p := range policies {
		set, err := diffEngines(p.name, p.src)
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
			continue
		}
		if check(p, set); len(bad) >= 10 {
			break
		}
	}
	// Generated policies: some are refused at load (ambiguity, shapes).
	refused, lastErr := 0, error(nil)
	for loaded := 0; loaded < synthetic && len(bad) < 10; {
		if refused > 20*synthetic {
			t.Fatalf("seed %d: only %d of %d generated policies load; last error: %v", seed, loaded, synthetic, lastErr)
		}
		p := diffPolicy{name: fmt.Sprintf("synthetic %d", loaded), src: genPolicy(r)}
		set, err := diffEngines(p.name, p.src)
		if err != nil {
			refused, lastErr = refused+1, err
			continue
		}
		loaded++
		check(p, set)
	}
	t.Logf("%d generated policies refused at load", refused)
	if len(bad) > 0 {
		t.Fatalf("seed %d (POLICY_INDEX_SEED=%d): the index disagrees with OPA on %d inputs (first ones):\n  %s",
			seed, seed, len(bad), strings.Join(bad, "\n  "))
	}
	t.Logf("seed %d: %d network and %d DNS decisions agree: %+v", seed, tally.inputs, tally.dnsInputs, tally)
	// The generator must reach every kind of decision, or agreement says
	// little.
	for what, n := range map[string]int{
		"allowed for an exe": tally.allowExe, "allowed with identity none": tally.allowNone,
		"binary_not_allowed": tally.binDeny, "endpoint_not_allowed": tally.epDeny,
		"DNS allowed": tally.dnsAllow, "DNS ineligible": tally.dnsDeny,
		"with allowed_ips": tally.ips, "with two or more allowed_ips ranges": tally.multiIPs,
		"exact host": tally.exact, "with a policy name": tally.named, "allowed by a pattern": tally.wildAllow,
	} {
		if n == 0 {
			t.Errorf("seed %d: no decision %s was generated", seed, what)
		}
	}
}

// TestIndexDiffDetectsBrokenIndex: the comparison catches an index that
// answers differently (here one whose endpoint names are rotated, and one
// that reads the wild table on a miss where the Rego reads host_entries).
func TestIndexDiffDetectsBrokenIndex(t *testing.T) {
	seed := indexSeed(t)
	for _, tc := range []struct {
		name    string
		src     string
		breakIt func(x *decisionIndex)
	}{
		{"names rotated", semanticsPolicy, func(x *decisionIndex) {
			x.names = append(x.names[1:], x.names[0])
		}},
		{"no pattern lookup", "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: \"*-api.example.com\", port: 443 }]\n    binaries: [{ path: /usr/bin/curl }]\n",
			func(x *decisionIndex) { x.patterns = false }},
		{"pattern tail filed wrong", "version: 1\nnetwork_policies:\n  p:\n    endpoints: [{ host: \"*-api.example.com\", port: 443 }]\n    binaries: [{ path: /usr/bin/curl }]\n",
			func(x *decisionIndex) {
				f := x.matcher.byTail["example.com"]
				f.byTail["-apx"], f.byTail["-api"] = f.byTail["-api"], nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			set, err := diffEngines("broken.yaml", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			p := diffPolicy{name: tc.name, src: []byte(tc.src)}
			if bad := runDiff(t, r, p, set, 300, 1, nil); len(bad) != 0 {
				t.Fatalf("seed %d: disagreement before breaking the index: %s", seed, bad[0])
			}
			tc.breakIt(set.indexed.cur.Load().index)
			if bad := runDiff(t, r, p, set, 300, 1, nil); len(bad) == 0 {
				t.Errorf("seed %d: a broken index agreed with OPA on 300 inputs", seed)
			}
		})
	}
}

// genPolicy writes a random policy: several network policies sharing a
// small pool of exact hosts, host patterns and host-less endpoints on a
// few ports (so endpoints overlap within and across policies), binaries
// exact and glob, names that differ from keys, allowed_ips. Some are
// refused at load (ambiguity, shapes): the caller skips those.
func genPolicy(r *rand.Rand) []byte {
	hosts := []string{
		"api.example.com", "db.internal.corp", "example.com", "a.b.example.com", "svc-1.example.net",
		"Upper.Example.ORG.", "github.com", "x.s3.eu.amazonaws.com", "192.168.1.100", "10.2.3.4", "2001:db8::5",
		"*.example.com", "**.example.com", "*-api.example.com", "*.s3.*.amazonaws.com", "*.internal.corp",
		"api-*.example.net", "*.b.example.com", "**.corp", "*x?.example.com", "*[0-9].example.net", "*.github.com",
		"**.internal.corp", "*.*.example.org",
	}
	// Ports in classes by allowed_ips: an endpoint's ports come from one
	// class, so overlapping endpoints agree on allowed_ips (a random range
	// on a few endpoints: ambiguity refuses those that overlap).
	classes := []struct {
		ports []int
		ips   string
	}{
		{[]int{443, 80, 8080, 1, 65535}, ""},
		{[]int{5432}, "[10.0.0.0/8]"},
		{[]int{6379, 22}, "[10.1.0.0/16, 192.168.0.0/16]"},
	}
	bins := []string{
		"/usr/bin/curl", "/usr/bin/python3", "/usr/local/bin/claude", "/bin/sh", "/usr/bin/git",
		"/opt/*/bin/tool", "/nix/store/**/bin/agent", "/usr/bin/*", "/**", "/home/*/.local/bin/copilot",
		"/usr/lib/**/node", "/usr/bin/python3.*", "/srv/[ab]*/run", "/opt/{x,y}/*", "/usr/bin/pyth?n*",
	}
	randIPs := []string{"[10.9.0.0/16]", "[192.168.7.0/24, 10.0.0.0/8]", "[172.20.0.1]", "[fd00::/8]"}
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for p, np := 0, 1+r.IntN(5); p < np; p++ {
		fmt.Fprintf(&b, "  p%d:\n", p)
		if r.IntN(2) == 0 {
			fmt.Fprintf(&b, "    name: Policy %d\n", p)
		}
		b.WriteString("    endpoints:\n")
		for e, ne := 0, 1+r.IntN(6); e < ne; e++ {
			class := classes[r.IntN(len(classes))]
			var ps []string
			for _, i := range r.Perm(len(class.ports))[:1+r.IntN(len(class.ports))] {
				ps = append(ps, strconv.Itoa(class.ports[i]))
			}
			ips := class.ips
			if r.IntN(20) == 0 {
				ips = randIPs[r.IntN(len(randIPs))]
			}
			if ips != "" && r.IntN(6) == 0 { // host-less: any name on its ports
				fmt.Fprintf(&b, "      - { ports: [%s], allowed_ips: %s }\n", strings.Join(ps, ", "), ips)
				continue
			}
			fmt.Fprintf(&b, "      - { host: %q, ports: [%s]", hosts[r.IntN(len(hosts))], strings.Join(ps, ", "))
			if ips != "" {
				fmt.Fprintf(&b, ", allowed_ips: %s", ips)
			}
			b.WriteString(" }\n")
		}
		if nb := r.IntN(5); nb > 0 || r.IntN(3) > 0 {
			b.WriteString("    binaries:\n")
			for _, i := range r.Perm(len(bins))[:nb] {
				fmt.Fprintf(&b, "      - { path: %q }\n", bins[i])
			}
			if nb == 0 {
				fmt.Fprintf(&b, "      - { path: %q }\n", bins[r.IntN(len(bins))])
			}
		}
	}
	return []byte(b.String())
}

// inputGen makes inputs for one policy from its hosts, ports and binaries.
type inputGen struct {
	r       *rand.Rand
	targets []target // names an endpoint (probably) matches, with its ports
	hosts   []string // other names to ask about (before variation)
	ports   []uint16
	bins    []string // paths the policy's binaries (probably) match
	exes    []string // other paths
}

type target struct {
	host  string
	ports []uint16
}

func newInputGen(r *rand.Rand, pol *Policy, p diffPolicy) *inputGen {
	g := &inputGen{r: r}
	add := func(h string) { g.hosts = append(g.hosts, h) }
	for _, np := range pol.NetworkPolicies {
		for _, ep := range np.Endpoints {
			g.ports = append(g.ports, ep.Ports...)
			for _, port := range ep.Ports {
				g.ports = append(g.ports, port-1, port+1)
			}
			if ep.Host == "" {
				continue
			}
			if !ep.Wildcard {
				g.targets = append(g.targets, target{ep.Host, ep.Ports})
				add(nearMiss(r, ep.Host))
				continue
			}
			for i := 0; i < 3; i++ {
				h := instantiateHost(r, ep.Host)
				g.targets = append(g.targets, target{h, ep.Ports})
				add(nearMiss(r, h))
			}
			add(strings.NewReplacer("*", "", "?", "x").Replace(ep.Host)) // the pattern's text, nearly
			add(ep.Host)                                                 // the pattern itself, as a name
		}
		for _, b := range np.Binaries {
			if !b.Glob {
				g.bins = append(g.bins, b.Path)
				g.exes = append(g.exes, b.Path+"x", strings.ToUpper(b.Path), filepath.Dir(b.Path))
				continue
			}
			for i := 0; i < 3; i++ {
				x := instantiateGlob(r, b.Path)
				g.bins = append(g.bins, x)
				g.exes = append(g.exes, x+"/x", "/x"+x)
			}
		}
	}
	for _, h := range p.hosts {
		g.targets = append(g.targets, target{h, []uint16{443}})
	}
	if len(g.targets) == 0 {
		g.targets = append(g.targets, target{"example.com", []uint16{443}})
	}
	g.hosts = append(g.hosts, "", ".", "..", "com", "example.org", "a..example.com", ".example.com",
		"ünïcode.example.com", "\xff\xfe.example.com", "a\x00.example.com", "a b.example.com",
		`q"uote.example.com`, "a%sb%d.example.com", strings.Repeat("l.", 60)+"example.com", "127.0.0.1", "localhost")
	g.ports = append(g.ports, 0, 1, 443, 65535, uint16(r.IntN(65536)))
	g.bins = append(g.bins, p.exes...)
	g.exes = append(g.exes, "", "/", "/usr/bin/curl", "/usr/bin/wget", "/bin/bash", "relative/curl",
		"/tmp/\xff\xfe", "/tmp/new\nline", `/tmp/q"uote\back`, "/tmp/100%done %s", "/usr/bin/ünïcode")
	return g
}

func (g *inputGen) pick(list []string) string { return list[g.r.IntN(len(list))] }

// vary changes a name's case and trailing dots now and then.
func (g *inputGen) vary(h string) string {
	switch g.r.IntN(8) {
	case 0:
		h = strings.ToUpper(h)
	case 1:
		b := []byte(h)
		for i := range b {
			if g.r.IntN(2) == 0 && b[i] >= 'a' && b[i] <= 'z' {
				b[i] -= 'a' - 'A'
			}
		}
		h = string(b)
	}
	switch g.r.IntN(8) {
	case 0:
		h += "."
	case 1:
		h += ".."
	}
	return h
}

// next is a DNS question one time in five, else a network decision: two
// times in three for a name and port some endpoint matches.
func (g *inputGen) next() diffInput {
	host := g.pick(g.hosts)
	port := g.ports[g.r.IntN(len(g.ports))]
	if g.r.IntN(3) > 0 {
		t := g.targets[g.r.IntN(len(g.targets))]
		host = t.host
		if len(t.ports) > 0 && g.r.IntN(4) > 0 {
			port = t.ports[g.r.IntN(len(t.ports))]
		}
	}
	if g.r.IntN(5) == 0 {
		return diffInput{dns: true, dq: DNSInput{Name: g.vary(host), QType: uint16(g.r.IntN(300))}}
	}
	in := NetworkInput{Host: g.vary(host), Port: port}
	if g.r.IntN(5) == 0 {
		in.IdentityNone = true
	}
	path := func() string {
		if len(g.bins) > 0 && g.r.IntN(3) == 0 {
			return g.pick(g.bins)
		}
		return g.pick(g.exes)
	}
	if !in.IdentityNone || g.r.IntN(2) == 0 {
		in.Exe = path()
		for n := g.r.IntN(4); n > 0; n-- {
			in.Ancestors = append(in.Ancestors, path())
		}
	}
	return diffInput{net: in}
}

// instantiateHost makes a name the host pattern probably matches: '**'
// becomes one to three labels, '*' a short run, '?' one character, a
// class one of its members.
func instantiateHost(r *rand.Rand, pat string) string {
	const alpha = "abcxyz019-_"
	var out []string
	for _, l := range strings.Split(pat, ".") {
		if l == "**" {
			for n := 1 + r.IntN(3); n > 0; n-- {
				out = append(out, randWord(r, alpha, 1+r.IntN(5)))
			}
			continue
		}
		var b strings.Builder
		for i := 0; i < len(l); i++ {
			switch l[i] {
			case '*':
				b.WriteString(randWord(r, alpha, r.IntN(4)))
			case '?':
				b.WriteString(randWord(r, alpha, 1))
			case '[':
				end := classEnd(l, i)
				if end < 0 {
					b.WriteByte('[')
					continue
				}
				b.WriteRune(classMember(r, l[i+1:end]))
				i = end
			default:
				b.WriteByte(l[i])
			}
		}
		out = append(out, b.String())
	}
	return strings.Join(out, ".")
}

// classMember picks a rune the class body matches (or any when none of
// the tries does).
func classMember(r *rand.Rand, body string) rune {
	const try = "abcxyz0123456789-_AZ"
	for i := 0; i < 20; i++ {
		c := rune(try[r.IntN(len(try))])
		if classMatch(body, c) {
			return c
		}
	}
	return 'q'
}

// instantiateGlob makes a path the binary glob probably matches: '**'
// becomes zero to three segments, '*' a short run within a segment, '?'
// one character, a class its first member, {a,b} one alternative.
func instantiateGlob(r *rand.Rand, pat string) string {
	const alpha = "abcxyz019._-"
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case strings.HasPrefix(pat[i:], "**"):
			var segs []string
			for n := r.IntN(4); n > 0; n-- {
				segs = append(segs, randWord(r, alpha, 1+r.IntN(5)))
			}
			b.WriteString(strings.Join(segs, "/"))
			i++
		case c == '*':
			b.WriteString(randWord(r, alpha, r.IntN(4)))
		case c == '?':
			b.WriteString(randWord(r, alpha, 1))
		case c == '[':
			end := strings.IndexByte(pat[i:], ']')
			if end < 2 {
				b.WriteByte(c)
				continue
			}
			body := pat[i+1 : i+end]
			if body[0] == '!' {
				b.WriteByte('Q')
			} else {
				b.WriteByte(body[0])
			}
			i += end
		case c == '{':
			end := strings.IndexByte(pat[i:], '}')
			if end < 0 {
				b.WriteByte(c)
				continue
			}
			alts := strings.Split(pat[i+1:i+end], ",")
			b.WriteString(alts[r.IntN(len(alts))])
			i += end
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func randWord(r *rand.Rand, alpha string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alpha[r.IntN(len(alpha))]
	}
	return string(b)
}

// nearMiss changes a name slightly: a label more or less, a character
// changed, a lookalike suffix.
func nearMiss(r *rand.Rand, h string) string {
	labels := strings.Split(h, ".")
	switch r.IntN(6) {
	case 0:
		if len(labels) > 1 {
			return strings.Join(labels[1:], ".")
		}
	case 1:
		return "x." + h
	case 2:
		if h != "" {
			i := r.IntN(len(h))
			return h[:i] + "q" + h[i+1:]
		}
	case 3:
		return h + ".evil"
	case 4:
		return "not" + h
	}
	return h + "x"
}
