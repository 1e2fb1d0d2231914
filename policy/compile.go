package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/types"
)

// regoModule is the decision logic, the same for every policy; a policy is
// compiled into the data document it reads (data.stockade, built by
// compile below):
//
//	exact: {host: {port: entries}}   endpoints naming the host exactly, plus
//	                                 the wildcard endpoints matching it
//	wild:  {suffix: {port: entries}} "*.example.com" under "example.com"
//	names: {endpoint id: policy key}  (every "policy" below is the
//	                                 network_policies key, as OpenShell)
//	patterns: true when a host needs stockade.host_entries / host_key:
//	          a pattern other than "*.<literal suffix>", or a host-less
//	          allowed_ips endpoint (hostMatcher, per version, in Go)
//	exact_host: {host: policy name}, wild_host: {suffix: policy name}  (DNS)
//	entries: {first: policy name of the first endpoint (file order),
//	          all: [endpoint id], bins: {exact binary path: [endpoint id]},
//	          globs: [[binary glob, endpoint id]]}
//
// Every lookup is an object key (no scan over hosts or globs), which keeps
// an uncached decision flat in the number of endpoints. Keys are strings
// (JSON data); OPA addresses data["443"] with the number 443.
//
// Input: network {host, port, suffix}, exec {path, ancestors}, identity
// {mode}, or dns {name, qtype, suffix}. The engine lower-cases host and
// name, drops a trailing dot, and sets suffix to the name without its first
// label ("" when there is none), so Rego does no string work.
//
// stockade.glob_ids(globs, paths) returns the endpoint ids of the [glob, id]
// pairs whose glob matches one of paths; it is glob.match(glob, ["/"], path)
// over patterns compiled once per version (OPA's own glob cache holds only
// 100 patterns for the whole process).
const regoModule = `package stockade.sandbox

import rego.v1

# Each extra rule costs a virtual-document evaluation (several µs), so the
# decision is one else-chain over a single helper rule.
entries := data.stockade.exact[input.network.host][input.network.port] if {
	data.stockade.exact[input.network.host]
} else := stockade.host_entries(input.network.host, input.network.port) if {
	data.stockade.patterns
} else := data.stockade.wild[input.network.suffix][input.network.port]

decision := {
	"allow": true,
	"reason": "",
	"policy": entries.first,
	"message": concat("", ["allowed by policy \"", entries.first, "\" (identity mode none: binaries ignored, endpoint-only match)"]),
	"endpoints": entries.all,
} if {
	input.identity.mode == "none"
	entries
} else := {
	"allow": true,
	"reason": "",
	"policy": name,
	"message": concat("", ["allowed by policy \"", name, "\" for ", input.exec.path]),
	"endpoints": ids,
} if {
	# Endpoints allowing the exe or an ancestor: exact paths, then globs.
	paths := array.concat([input.exec.path], input.exec.ancestors)
	ids := array.concat(
		[id | some p in paths; some id in entries.bins[p]],
		stockade.glob_ids(entries.globs, paths),
	)
	name := data.stockade.names[ids[0]]
} else := {
	"allow": false,
	"reason": "binary_not_allowed",
	"policy": entries.first,
	"message": sprintf("policy %q lists %s:%d but neither binary %s nor its ancestors %v", [entries.first, input.network.host, input.network.port, input.exec.path, input.exec.ancestors]),
	"endpoints": [],
} if {
	entries
} else := {
	"allow": false,
	"reason": "endpoint_not_allowed",
	"policy": "-",
	"message": sprintf("no policy lists %s:%d (identity mode none: binaries ignored, endpoint-only match)", [input.network.host, input.network.port]),
	"endpoints": [],
} if {
	input.identity.mode == "none"
} else := {
	"allow": false,
	"reason": "endpoint_not_allowed",
	"policy": "-",
	"message": sprintf("no policy lists %s:%d", [input.network.host, input.network.port]),
	"endpoints": [],
}

dns_decision := {
	"allow": true,
	"reason": "",
	"policy": name,
	"message": concat("", [input.dns.name, " is an endpoint host of policy \"", name, "\""]),
	"endpoints": [],
} if {
	name := data.stockade.exact_host[input.dns.name]
} else := {
	"allow": true,
	"reason": "",
	"policy": name,
	"message": concat("", [input.dns.name, " matches a wildcard host of policy \"", name, "\""]),
	"endpoints": [],
} if {
	name := data.stockade.wild_host[input.dns.suffix]
} else := {
	"allow": true,
	"reason": "",
	"policy": name,
	"message": concat("", [input.dns.name, " matches a host pattern of policy \"", name, "\""]),
	"endpoints": [],
} if {
	data.stockade.patterns
	name := stockade.host_key(input.dns.name)
} else := {
	"allow": false,
	"reason": "policy_dns_ineligible",
	"policy": "-",
	"message": concat("", [input.dns.name, " is no endpoint host in any policy"]),
	"endpoints": [],
}
`

// endpointInfo is what a decision reports about an allowing endpoint.
type endpointInfo struct {
	exact      bool
	allowedIPs []netip.Prefix
}

// compiled is a policy ready for evaluation: prepared queries over its
// data document, the endpoint table the Rego ids index into, and the
// policy names by network_policies key (only those that differ from it).
type compiled struct {
	network   rego.PreparedEvalQuery
	dns       rego.PreparedEvalQuery
	endpoints []endpointInfo
	names     map[string]string
	// index answers in front of OPA (nil: OPA decides alone, because the
	// engine runs without an index or because indexErr says why not).
	index    *decisionIndex
	indexErr error
}

// endpointRef is an endpoint with its global id (file order).
type endpointRef struct {
	id  int
	np  *NetworkPolicy
	ep  *Endpoint
	key string // host, or wildcard suffix
}

// hostGroup is the endpoints sharing one host pattern, or the host-less
// (allowed_ips only) endpoints, which match every host (pat nil).
type hostGroup struct {
	pat   *hostPattern
	refs  []endpointRef
	table ast.Object // portTable(refs)
}

// hostMatcher finds the pattern groups matching a host without scanning
// every pattern: a pattern is filed under its trailing literal labels, so a
// host looks up each of its proper suffixes (one map lookup per label).
// Under one suffix, a pattern whose wildcard label (the one before the
// suffix) ends in literal characters, as "*-svc1" in "*-svc1.example.com",
// is filed under that tail too: only a host whose label before the suffix
// ends so can match, so 1,000 such patterns under example.com cost a few
// lookups, not 1,000 matches.
type hostMatcher struct {
	groups   []*hostGroup
	bySuffix map[string][]int       // literal suffix -> group indexes, ascending
	byTail   map[string]*tailFilter // literal suffix -> patterns with a literal tail
	hostless *hostGroup             // nil when no endpoint is host-less
}

// tailFilter is the patterns under one suffix whose wildcard label ends in
// a literal tail, by tail, and the tail lengths in use.
type tailFilter struct {
	lens   []int
	byTail map[string][]int // tail -> group indexes, ascending
}

// add files a group's pattern under its literal suffix (and the tail of
// the label before it, when that is not "**" and ends in literals).
func (m *hostMatcher) add(pat *hostPattern, group int) {
	suffix := pat.literalSuffix()
	if tail := pat.wildcardTail(); tail != "" {
		f := m.byTail[suffix]
		if f == nil {
			f = &tailFilter{byTail: map[string][]int{}}
			m.byTail[suffix] = f
		}
		if !slices.Contains(f.lens, len(tail)) {
			f.lens = append(f.lens, len(tail))
		}
		f.byTail[tail] = append(f.byTail[tail], group)
		return
	}
	m.bySuffix[suffix] = append(m.bySuffix[suffix], group)
}

// matching returns the indexes of the pattern groups matching host, in
// group order (host-less endpoints not included).
func (m *hostMatcher) matching(host string) []int {
	var out []int
	try := func(groups []int) {
		for _, g := range groups {
			if m.groups[g].pat.match(host) {
				out = append(out, g)
			}
		}
	}
	for rest := host; ; {
		label := rest
		if i := strings.IndexByte(rest, '.'); i < 0 {
			rest = ""
		} else {
			label, rest = rest[:i], rest[i+1:]
		}
		try(m.bySuffix[rest])
		if f := m.byTail[rest]; f != nil {
			for _, n := range f.lens {
				if n <= len(label) {
					try(f.byTail[label[len(label)-n:]])
				}
			}
		}
		if rest == "" {
			break
		}
	}
	slices.Sort(out)
	return out
}

// refs returns the endpoints of the pattern groups matching host, then the
// host-less ones.
func (m *hostMatcher) refs(host string) []endpointRef {
	var out []endpointRef
	for _, g := range m.matching(host) {
		out = append(out, m.groups[g].refs...)
	}
	if m.hostless != nil {
		out = append(out, m.hostless.refs...)
	}
	return out
}

// entries implements stockade.host_entries(host, port): the entries (see
// regoModule) of every pattern and host-less endpoint matching host:port,
// undefined when none.
func (m *hostMatcher) entries(host, port *ast.Term) (*ast.Term, error) {
	h, ok1 := host.Value.(ast.String)
	num, ok2 := port.Value.(ast.Number)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("stockade.host_entries: want a string and a number, got %v and %v", host, port)
	}
	groups := m.matching(string(h))
	if m.hostless != nil {
		groups = append(groups, -1)
	}
	group := func(i int) *hostGroup {
		if i < 0 {
			return m.hostless
		}
		return m.groups[i]
	}
	switch len(groups) {
	case 0:
		return nil, nil
	case 1:
		return group(groups[0]).table.Get(ast.StringTerm(num.String())), nil
	}
	p, ok := num.Int()
	if !ok || p < 1 || p > 65535 {
		return nil, nil
	}
	var refs []endpointRef
	for _, g := range groups {
		for _, r := range group(g).refs {
			if slices.Contains(r.ep.Ports, uint16(p)) {
				refs = append(refs, r)
			}
		}
	}
	if len(refs) == 0 {
		return nil, nil
	}
	return ast.NewTerm(portEntry(refs)), nil
}

// key implements stockade.host_key(name): the policy key of the first
// pattern group matching name (DNS eligibility), undefined when none.
func (m *hostMatcher) key(name *ast.Term) (*ast.Term, error) {
	n, ok := name.Value.(ast.String)
	if !ok {
		return nil, fmt.Errorf("stockade.host_key: want a string, got %v", name)
	}
	if k, ok := m.firstKey(string(n)); ok {
		return ast.StringTerm(k), nil
	}
	return nil, nil
}

// firstKey is the policy key of the first pattern group matching name.
func (m *hostMatcher) firstKey(name string) (string, bool) {
	if gs := m.matching(name); len(gs) > 0 {
		return m.groups[gs[0]].refs[0].np.Key, true
	}
	return "", false
}

// compile builds the data document of a policy and prepares the network
// and DNS queries once; withIndex also derives the decision index from the
// same document (see buildIndex).
func compile(ctx context.Context, compiler *ast.Compiler, pol *Policy, withIndex bool) (*compiled, error) {
	c := &compiled{names: map[string]string{}}
	names := ast.NewObject()
	exactHost, wildHost := ast.NewObject(), ast.NewObject()
	byHost, bySuffix := map[string][]endpointRef{}, map[string][]endpointRef{}
	var hostOrder, suffixOrder []string
	globs := map[string]*glob.Pattern{}
	m := &hostMatcher{bySuffix: map[string][]int{}, byTail: map[string]*tailFilter{}}
	patGroup := map[string]*hostGroup{}
	simpleOnly := true // every pattern is "*.<literal suffix>": the wild table answers
	for _, np := range pol.NetworkPolicies {
		if np.Name != np.Key {
			c.names[np.Key] = np.Name // decisions carry a name only where it differs
		}
		for _, b := range np.Binaries {
			if b.Glob && globs[b.Path] == nil {
				g, err := glob.Compile(b.Path, '/')
				if err != nil {
					return nil, fmt.Errorf("compile binary glob %q: %w", b.Path, err)
				}
				globs[b.Path] = g
			}
		}
		for _, ep := range np.Endpoints {
			ref := endpointRef{id: len(c.endpoints), np: np, ep: ep, key: ep.Host}
			c.endpoints = append(c.endpoints, endpointInfo{exact: !ep.Wildcard && ep.Host != "", allowedIPs: ep.AllowedIPs})
			names.Insert(ast.StringTerm(strconv.Itoa(ref.id)), ast.StringTerm(np.Key))
			if ep.Host == "" {
				if m.hostless == nil {
					m.hostless = &hostGroup{}
				}
				m.hostless.refs = append(m.hostless.refs, ref)
				simpleOnly = false
				continue
			}
			if ep.Wildcard {
				g := patGroup[ep.Host]
				if g == nil {
					pat, err := compileHostPattern(ep.Host)
					if err != nil {
						return nil, fmt.Errorf("compile host pattern: %w", err)
					}
					g = &hostGroup{pat: pat}
					patGroup[ep.Host] = g
					suffix := pat.literalSuffix()
					m.add(pat, len(m.groups))
					m.groups = append(m.groups, g)
					if ep.Host != "*."+suffix || suffix == "" {
						simpleOnly = false
					}
				}
				g.refs = append(g.refs, ref)
			}
			if ep.Wildcard && !strings.HasPrefix(ep.Host, "*.") {
				continue // only "*.<suffix>" hosts go to the wild table
			}
			table, index, order := exactHost, byHost, &hostOrder
			if ep.Wildcard {
				ref.key = ep.Host[2:]
				table, index, order = wildHost, bySuffix, &suffixOrder
			}
			if index[ref.key] == nil {
				*order = append(*order, ref.key)
				table.Insert(ast.StringTerm(ref.key), ast.StringTerm(np.Key))
			}
			index[ref.key] = append(index[ref.key], ref)
		}
	}
	for _, g := range m.groups {
		g.table = portTable(g.refs)
	}
	if m.hostless != nil {
		m.hostless.table = portTable(m.hostless.refs)
	}
	exact, wild := ast.NewObject(), ast.NewObject()
	for _, h := range hostOrder {
		// A listed host also gets the pattern and host-less endpoints
		// matching it, so one lookup finds every candidate.
		refs := append(slices.Clip(byHost[h]), m.refs(h)...)
		exact.Insert(ast.StringTerm(h), ast.NewTerm(portTable(refs)))
	}
	for _, s := range suffixOrder {
		wild.Insert(ast.StringTerm(s), ast.NewTerm(portTable(bySuffix[s])))
	}
	doc := ast.NewObject(
		ast.Item(ast.StringTerm("exact"), ast.NewTerm(exact)),
		ast.Item(ast.StringTerm("wild"), ast.NewTerm(wild)),
		ast.Item(ast.StringTerm("names"), ast.NewTerm(names)),
		ast.Item(ast.StringTerm("exact_host"), ast.NewTerm(exactHost)),
		ast.Item(ast.StringTerm("wild_host"), ast.NewTerm(wildHost)),
		ast.Item(ast.StringTerm("patterns"), ast.BooleanTerm(!simpleOnly)),
	)
	if withIndex {
		// Before the store takes the document: the index reads it as OPA will.
		c.index, c.indexErr = buildIndex(doc, m, globs, len(c.endpoints))
	}
	store := inmem.NewFromASTObject(ast.NewObject(ast.Item(ast.StringTerm("stockade"), ast.NewTerm(doc))))
	decl := globIDsDecl()
	globIDs := rego.Function2(&rego.Function{Name: decl.Name, Decl: decl.Decl}, func(_ rego.BuiltinContext, pairs, paths *ast.Term) (*ast.Term, error) {
		return globIDsBuiltin(globs, pairs, paths)
	})
	hdecl, kdecl := hostEntriesDecl(), hostKeyDecl()
	hostEntries := rego.Function2(&rego.Function{Name: hdecl.Name, Decl: hdecl.Decl}, func(_ rego.BuiltinContext, host, port *ast.Term) (*ast.Term, error) {
		return m.entries(host, port)
	})
	hostKey := rego.Function1(&rego.Function{Name: kdecl.Name, Decl: kdecl.Decl}, func(_ rego.BuiltinContext, name *ast.Term) (*ast.Term, error) {
		return m.key(name)
	})
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		return rego.New(
			rego.Query(query),
			rego.Compiler(compiler),
			rego.Store(store),
			rego.StrictBuiltinErrors(true),
			globIDs, hostEntries, hostKey,
		).PrepareForEval(ctx)
	}
	var err error
	if c.network, err = prepare("data.stockade.sandbox.decision"); err != nil {
		return nil, fmt.Errorf("prepare network query: %w", err)
	}
	if c.dns, err = prepare("data.stockade.sandbox.dns_decision"); err != nil {
		return nil, fmt.Errorf("prepare DNS query: %w", err)
	}
	return c, nil
}

// portTable groups endpoints by port: {port: entries} (see regoModule).
func portTable(refs []endpointRef) ast.Object {
	out := ast.NewObject()
	var ports []uint16
	byPort := map[uint16][]endpointRef{}
	for _, r := range refs {
		for _, p := range r.ep.Ports {
			if byPort[p] == nil {
				ports = append(ports, p)
			}
			byPort[p] = append(byPort[p], r)
		}
	}
	for _, p := range ports {
		out.Insert(ast.StringTerm(strconv.Itoa(int(p))), ast.NewTerm(portEntry(byPort[p])))
	}
	return out
}

// portEntry builds the entries of one port from its endpoints (file
// order within each source; see regoModule).
func portEntry(rs []endpointRef) ast.Object {
	all, globs := []*ast.Term{}, []*ast.Term{}
	bins, binOrder := map[string][]*ast.Term{}, []string{}
	for _, r := range rs {
		id := ast.IntNumberTerm(r.id)
		all = append(all, id)
		for _, b := range r.np.Binaries {
			if b.Glob {
				globs = append(globs, ast.ArrayTerm(ast.StringTerm(b.Path), id))
				continue
			}
			if bins[b.Path] == nil {
				binOrder = append(binOrder, b.Path)
			}
			bins[b.Path] = append(bins[b.Path], id)
		}
	}
	binObj := ast.NewObject()
	for _, b := range binOrder {
		binObj.Insert(ast.StringTerm(b), ast.ArrayTerm(bins[b]...))
	}
	return ast.NewObject(
		ast.Item(ast.StringTerm("first"), ast.StringTerm(rs[0].np.Key)),
		ast.Item(ast.StringTerm("all"), ast.ArrayTerm(all...)),
		ast.Item(ast.StringTerm("bins"), ast.NewTerm(binObj)),
		ast.Item(ast.StringTerm("globs"), ast.ArrayTerm(globs...)),
	)
}

// globIDsBuiltin implements stockade.glob_ids over precompiled globs.
func globIDsBuiltin(globs map[string]*glob.Pattern, pairs, paths *ast.Term) (*ast.Term, error) {
	pa, ok1 := pairs.Value.(*ast.Array)
	ps, ok2 := paths.Value.(*ast.Array)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("stockade.glob_ids: want arrays, got %v and %v", pairs, paths)
	}
	var ids []*ast.Term
	for i := 0; i < pa.Len(); i++ {
		pair, _ := pa.Elem(i).Value.(*ast.Array)
		if pair == nil || pair.Len() != 2 {
			return nil, fmt.Errorf("stockade.glob_ids: %v is not a [glob, id] pair", pa.Elem(i))
		}
		pattern, _ := pair.Elem(0).Value.(ast.String)
		g := globs[string(pattern)]
		if g == nil {
			return nil, fmt.Errorf("stockade.glob_ids: %v is not a compiled glob", pair.Elem(0))
		}
		for j := 0; j < ps.Len(); j++ {
			if s, ok := ps.Elem(j).Value.(ast.String); ok && g.Match(string(s)) {
				ids = append(ids, pair.Elem(1))
				break
			}
		}
	}
	return ast.ArrayTerm(ids...), nil
}

// suffixOf returns a name without its first label, "" when the first label
// is empty or there is no second one.
func suffixOf(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] == '.' {
			if i == 0 {
				return ""
			}
			return name[i+1:]
		}
	}
	return ""
}

// globIDsDecl declares stockade.glob_ids(pairs, paths) -> ids.
func globIDsDecl() *ast.Builtin {
	return &ast.Builtin{
		Name: "stockade.glob_ids",
		Decl: types.NewFunction(types.Args(types.NewArray(nil, types.A), types.NewArray(nil, types.S)), types.NewArray(nil, types.N)),
	}
}

// hostEntriesDecl declares stockade.host_entries(host, port) -> entries.
func hostEntriesDecl() *ast.Builtin {
	return &ast.Builtin{
		Name: "stockade.host_entries",
		Decl: types.NewFunction(types.Args(types.S, types.N), types.A),
	}
}

// hostKeyDecl declares stockade.host_key(name) -> policy key.
func hostKeyDecl() *ast.Builtin {
	return &ast.Builtin{
		Name: "stockade.host_key",
		Decl: types.NewFunction(types.Args(types.S), types.S),
	}
}

// compileModule parses and compiles the decision module; the engine does it
// once and every version prepares its queries against it.
func compileModule() (*ast.Compiler, error) {
	m, err := ast.ParseModuleWithOpts("stockade/sandbox.rego", regoModule, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, fmt.Errorf("parse decision module: %w", err)
	}
	builtins := map[string]*ast.Builtin{}
	for _, b := range []*ast.Builtin{globIDsDecl(), hostEntriesDecl(), hostKeyDecl()} {
		builtins[b.Name] = b
	}
	//lint:ignore SA1019 three custom builtins; WithCapabilities would restate OPA's whole builtin set
	c := ast.NewCompiler().WithBuiltins(builtins)
	if c.Compile(map[string]*ast.Module{"stockade/sandbox.rego": m}); c.Failed() {
		return nil, fmt.Errorf("compile decision module: %w", c.Errors)
	}
	return c, nil
}
