package policy

import (
	"fmt"
	"strconv"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/stockade-dev/stockade/policy/reason"
)

// The decision index answers regoModule in Go, in front of OPA. OPA stays
// the definition: the index is built per version from the very data
// document the Rego reads (data.stockade, see compile) and from the same
// per-version builtins (hostMatcher for stockade.host_entries and
// stockade.host_key, the compiled globs of stockade.glob_ids). Its Go code
// follows the Rego rules branch by branch and returns the decision object
// the Rego would (rawDecision), which the engine turns into a Decision
// exactly as it does OPA's answer (snapshot.finish).
//
// It is checked against OPA by TestIndexAgreesWithOPA (index_test.go), a
// randomized differential test over the compat and synthetic policies.
// When the data document has a shape the index does not know, buildIndex
// fails and that version is decided by OPA alone (the engine logs it).

// rawDecision is the decision object of regoModule: allow, reason, policy
// (a network_policies key or "-"), message and the allowing endpoint ids
// (in the Rego's order, duplicates kept).
type rawDecision struct {
	allow   bool
	reason  reason.Code
	policy  string
	message string
	ids     []int
}

// ixEntry is one "entries" object of the data document: {first, all,
// bins, globs}.
type ixEntry struct {
	first string
	all   []int
	bins  map[string][]int
	globs []ixGlob
}

// ixGlob is one [binary glob, endpoint id] pair, the glob compiled.
type ixGlob struct {
	g  *glob.Pattern
	id int
}

// ixPorts is a {port: entries} table of the data document.
type ixPorts map[uint16]*ixEntry

// decisionIndex is regoModule compiled over one version's data document.
// It is immutable and shared by concurrent decisions.
type decisionIndex struct {
	exact     map[string]ixPorts // data.stockade.exact
	wild      map[string]ixPorts // data.stockade.wild
	names     []string           // data.stockade.names, by endpoint id
	exactHost map[string]string  // data.stockade.exact_host
	wildHost  map[string]string  // data.stockade.wild_host
	patterns  bool               // data.stockade.patterns
	// The state of stockade.host_entries: the matcher and its group tables
	// (hostMatcher.groups[i].table and hostless.table), converted.
	matcher  *hostMatcher
	groups   []ixPorts
	hostless ixPorts // nil when no endpoint is host-less
}

// buildIndex converts a version's data document (the object under
// data.stockade) and its builtins' state into a decisionIndex. Any shape
// it does not expect is an error: the version is then left to OPA.
func buildIndex(doc ast.Object, m *hostMatcher, globs map[string]*glob.Pattern, endpoints int) (*decisionIndex, error) {
	x := &decisionIndex{matcher: m}
	conv := &ixConverter{globs: globs, endpoints: endpoints, entries: map[ast.Object]*ixEntry{}}
	var err error
	if x.exact, err = conv.hostTable(doc, "exact"); err != nil {
		return nil, err
	}
	if x.wild, err = conv.hostTable(doc, "wild"); err != nil {
		return nil, err
	}
	if x.exactHost, err = stringTable(doc, "exact_host"); err != nil {
		return nil, err
	}
	if x.wildHost, err = stringTable(doc, "wild_host"); err != nil {
		return nil, err
	}
	names, err := stringTable(doc, "names")
	if err != nil {
		return nil, err
	}
	if len(names) != endpoints {
		return nil, fmt.Errorf("index: %d endpoint names for %d endpoints", len(names), endpoints)
	}
	x.names = make([]string, endpoints)
	for k, v := range names {
		id, err := conv.id(ast.StringTerm(k))
		if err != nil {
			return nil, fmt.Errorf("index: names: %w", err)
		}
		x.names[id] = v
	}
	pat, ok := member[ast.Boolean](doc, "patterns")
	if !ok {
		return nil, fmt.Errorf("index: patterns is not a boolean")
	}
	x.patterns = bool(pat)
	for i, g := range m.groups {
		t, err := conv.ports(g.table)
		if err != nil {
			return nil, fmt.Errorf("index: host pattern %d: %w", i, err)
		}
		x.groups = append(x.groups, t)
	}
	if m.hostless != nil {
		if x.hostless, err = conv.ports(m.hostless.table); err != nil {
			return nil, fmt.Errorf("index: host-less endpoints: %w", err)
		}
	}
	return x, nil
}

// member reads a typed member of an object.
func member[T ast.Value](obj ast.Object, key string) (T, bool) {
	var zero T
	t := obj.Get(ast.StringTerm(key))
	if t == nil {
		return zero, false
	}
	v, ok := t.Value.(T)
	return v, ok
}

// stringTable reads a {string: string} member.
func stringTable(doc ast.Object, key string) (map[string]string, error) {
	obj, ok := member[ast.Object](doc, key)
	if !ok {
		return nil, fmt.Errorf("index: %s is not an object", key)
	}
	out := make(map[string]string, obj.Len())
	err := obj.Iter(func(k, v *ast.Term) error {
		ks, ok1 := k.Value.(ast.String)
		vs, ok2 := v.Value.(ast.String)
		if !ok1 || !ok2 {
			return fmt.Errorf("index: %s: %v: %v is not string to string", key, k, v)
		}
		out[string(ks)] = string(vs)
		return nil
	})
	return out, err
}

// ixConverter converts entries objects, each distinct one once (the
// group tables share values with the exact table).
type ixConverter struct {
	globs     map[string]*glob.Pattern
	endpoints int
	entries   map[ast.Object]*ixEntry
}

// hostTable reads a {name: {port: entries}} member.
func (c *ixConverter) hostTable(doc ast.Object, key string) (map[string]ixPorts, error) {
	obj, ok := member[ast.Object](doc, key)
	if !ok {
		return nil, fmt.Errorf("index: %s is not an object", key)
	}
	out := make(map[string]ixPorts, obj.Len())
	err := obj.Iter(func(k, v *ast.Term) error {
		ks, ok1 := k.Value.(ast.String)
		vo, ok2 := v.Value.(ast.Object)
		if !ok1 || !ok2 {
			return fmt.Errorf("index: %s: %v is not a port table", key, k)
		}
		t, err := c.ports(vo)
		if err != nil {
			return fmt.Errorf("index: %s[%v]: %w", key, k, err)
		}
		out[string(ks)] = t
		return nil
	})
	return out, err
}

// ports reads a {port: entries} table. Its keys are decimal port numbers
// (OPA looks a number up as its decimal string), canonical and in range,
// so a uint16 names the same entry.
func (c *ixConverter) ports(obj ast.Object) (ixPorts, error) {
	out := make(ixPorts, obj.Len())
	err := obj.Iter(func(k, v *ast.Term) error {
		ks, ok := k.Value.(ast.String)
		if !ok {
			return fmt.Errorf("port key %v is not a string", k)
		}
		p, err := strconv.ParseUint(string(ks), 10, 16)
		if err != nil || strconv.FormatUint(p, 10) != string(ks) {
			return fmt.Errorf("port key %v is not a canonical port number", k)
		}
		e, err := c.entry(v.Value)
		if err != nil {
			return fmt.Errorf("port %v: %w", k, err)
		}
		out[uint16(p)] = e
		return nil
	})
	return out, err
}

// entry reads one {first, all, bins, globs} object.
func (c *ixConverter) entry(v ast.Value) (*ixEntry, error) {
	obj, ok := v.(ast.Object)
	if !ok || obj.Len() != 4 {
		return nil, fmt.Errorf("entries %v is not {first, all, bins, globs}", v)
	}
	if e := c.entries[obj]; e != nil {
		return e, nil
	}
	first, ok1 := member[ast.String](obj, "first")
	all, ok2 := member[*ast.Array](obj, "all")
	bins, ok3 := member[ast.Object](obj, "bins")
	globs, ok4 := member[*ast.Array](obj, "globs")
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("entries %v is not {first, all, bins, globs}", v)
	}
	e := &ixEntry{first: string(first), bins: make(map[string][]int, bins.Len())}
	var err error
	if e.all, err = c.ids(all); err != nil {
		return nil, err
	}
	err = bins.Iter(func(k, v *ast.Term) error {
		ks, ok1 := k.Value.(ast.String)
		va, ok2 := v.Value.(*ast.Array)
		if !ok1 || !ok2 {
			return fmt.Errorf("bins: %v: %v is not a path to ids", k, v)
		}
		ids, err := c.ids(va)
		e.bins[string(ks)] = ids
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := 0; i < globs.Len(); i++ {
		pair, _ := globs.Elem(i).Value.(*ast.Array)
		if pair == nil || pair.Len() != 2 {
			return nil, fmt.Errorf("globs: %v is not a [glob, id] pair", globs.Elem(i))
		}
		pattern, _ := pair.Elem(0).Value.(ast.String)
		g := c.globs[string(pattern)]
		if g == nil {
			return nil, fmt.Errorf("globs: %v is not a compiled glob", pair.Elem(0))
		}
		id, err := c.id(pair.Elem(1))
		if err != nil {
			return nil, fmt.Errorf("globs: %w", err)
		}
		e.globs = append(e.globs, ixGlob{g: g, id: id})
	}
	c.entries[obj] = e
	return e, nil
}

// ids reads an array of endpoint ids.
func (c *ixConverter) ids(a *ast.Array) ([]int, error) {
	out := make([]int, a.Len())
	for i := range out {
		id, err := c.id(a.Elem(i))
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// id reads one endpoint id: a number, or the decimal string of one (the
// keys of names), naming an endpoint of the version.
func (c *ixConverter) id(t *ast.Term) (int, error) {
	var n int
	var ok bool
	switch v := t.Value.(type) {
	case ast.Number:
		n, ok = v.Int()
	case ast.String:
		var err error
		n, err = strconv.Atoi(string(v))
		ok = err == nil && strconv.Itoa(n) == string(v)
	}
	if !ok || n < 0 || n >= c.endpoints {
		return 0, fmt.Errorf("%v names no endpoint", t)
	}
	return n, nil
}

// lookup is the Rego's entries rule: the exact table when it has the
// host, else stockade.host_entries when the version has patterns, else the
// wild table by suffix. The entries objects that make it up are appended
// to buf (stockade.host_entries merges several tables' entries: their
// concatenation, in group order, is the merged object).
func (x *decisionIndex) lookup(host string, port uint16, buf []*ixEntry) []*ixEntry {
	if ports, ok := x.exact[host]; ok {
		if e := ports[port]; e != nil {
			buf = append(buf, e)
		}
		return buf
	}
	if x.patterns {
		for _, g := range x.matcher.matching(host) {
			if e := x.groups[g][port]; e != nil {
				buf = append(buf, e)
			}
		}
		if e := x.hostless[port]; e != nil {
			buf = append(buf, e)
		}
		return buf
	}
	if e := x.wild[suffixOf(host)][port]; e != nil {
		buf = append(buf, e)
	}
	return buf
}

// network is regoModule's decision for a normalised input.
func (x *decisionIndex) network(in *NetworkInput) rawDecision {
	var buf [4]*ixEntry
	ents := x.lookup(in.Host, in.Port, buf[:0])
	if len(ents) > 0 {
		first := ents[0].first
		if in.IdentityNone {
			var ids []int
			for _, e := range ents {
				ids = append(ids, e.all...)
			}
			return rawDecision{allow: true, policy: first, ids: ids,
				message: "allowed by policy \"" + first + "\" (identity mode none: binaries ignored, endpoint-only match)"}
		}
		if ids := x.binaryIDs(ents, in); len(ids) > 0 {
			name := x.names[ids[0]]
			return rawDecision{allow: true, policy: name, ids: ids,
				message: "allowed by policy \"" + name + "\" for " + in.Exe}
		}
		// sprintf("policy %q lists %s:%d but neither binary %s nor its
		// ancestors %v", ...): %q is strconv.Quote, an array prints as
		// regoStrings.
		return rawDecision{reason: reason.BinaryNotAllowed, policy: first,
			message: "policy " + strconv.Quote(first) + " lists " + hostPort(in) +
				" but neither binary " + in.Exe + " nor its ancestors " + regoStrings(in.Ancestors)}
	}
	if in.IdentityNone {
		return rawDecision{reason: reason.EndpointNotAllowed, policy: "-",
			message: "no policy lists " + hostPort(in) + " (identity mode none: binaries ignored, endpoint-only match)"}
	}
	return rawDecision{reason: reason.EndpointNotAllowed, policy: "-", message: "no policy lists " + hostPort(in)}
}

// hostPort is the Rego's "%s:%d" of host and port.
func hostPort(in *NetworkInput) string {
	return in.Host + ":" + strconv.Itoa(int(in.Port))
}

// binaryIDs is the Rego's ids: for each path (the exe, then its
// ancestors) the ids of bins[path], then the ids of the globs matching one
// of the paths (stockade.glob_ids), over the merged entries.
func (x *decisionIndex) binaryIDs(ents []*ixEntry, in *NetworkInput) []int {
	var ids []int
	path := func(i int) string {
		if i == 0 {
			return in.Exe
		}
		return in.Ancestors[i-1]
	}
	n := 1 + len(in.Ancestors)
	for i := 0; i < n; i++ {
		p := path(i)
		for _, e := range ents {
			ids = append(ids, e.bins[p]...)
		}
	}
	for _, e := range ents {
		for _, g := range e.globs {
			for i := 0; i < n; i++ {
				if g.g.Match(path(i)) {
					ids = append(ids, g.id)
					break
				}
			}
		}
	}
	return ids
}

// dns is regoModule's dns_decision for a normalised name.
func (x *decisionIndex) dns(name string) rawDecision {
	if k, ok := x.exactHost[name]; ok {
		return rawDecision{allow: true, policy: k, message: name + " is an endpoint host of policy \"" + k + "\""}
	}
	if k, ok := x.wildHost[suffixOf(name)]; ok {
		return rawDecision{allow: true, policy: k, message: name + " matches a wildcard host of policy \"" + k + "\""}
	}
	if x.patterns {
		if k, ok := x.matcher.firstKey(name); ok {
			return rawDecision{allow: true, policy: k, message: name + " matches a host pattern of policy \"" + k + "\""}
		}
	}
	return rawDecision{reason: reason.PolicyDNSIneligible, policy: "-", message: name + " is no endpoint host in any policy"}
}

// regoStrings formats a list of strings as OPA's sprintf prints an array
// of strings for %v: ["a", "b"].
func regoStrings(list []string) string {
	if len(list) == 0 {
		return "[]"
	}
	b := make([]byte, 0, 64)
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, s)
	}
	return string(append(b, ']'))
}
