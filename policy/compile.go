package policy

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/types"
)

// regoModule is the decision logic; it is the same for every policy. A
// policy is compiled into the data document (data.stockade) it reads:
//
//	hosts:     {exact host: [entry]}          exact hosts are object keys
//	wildcards: {suffix: [entry]}              "*.example.com" under "example.com"
//	binaries:  {"policy index": {exact: {path: true}, globs: [pattern]}}
//	entry:     {id: endpoint index, policy: "policy index", name, ports: {port}}
//
// (Data keys are strings and exact paths an object, not a set: storage
// paths address neither number keys nor set members.)
//
// Entries are in file order, so the first allowing entry (exact hosts
// before wildcards) names the decision's policy deterministically.
// stockade.path_glob is glob.match(pattern, ["/"], path) over patterns
// compiled once at load (OPA's own glob cache holds only 100 patterns for
// the whole process).
const regoModule = `package stockade.sandbox

import rego.v1

# The engine normalises hosts and names (lower case, no trailing dot).
net_host := input.network.host

net_port := input.network.port

identity_none if input.identity.mode == "none"

mode_note := " (identity mode none: binaries ignored, endpoint-only match)" if identity_none
else := ""

# suffix("a.example.com") == "example.com"; undefined without a first label.
suffix(name) := substring(name, i + 1, -1) if {
	i := indexof(name, ".")
	i > 0
}

candidates := array.concat(
	[e | some e in data.stockade.hosts[net_host]; e.ports[net_port]],
	[e | some e in data.stockade.wildcards[suffix(net_host)]; e.ports[net_port]],
)

exec_paths := array.concat([input.exec.path], input.exec.ancestors)

binary_allowed(_) if identity_none

binary_allowed(pol) if {
	some p in exec_paths
	data.stockade.binaries[pol].exact[p]
}

binary_allowed(pol) if {
	some g in data.stockade.binaries[pol].globs
	some p in exec_paths
	stockade.path_glob(g, p)
}

allowed := [e | some e in candidates; binary_allowed(e.policy)]

decision := {
	"allow": true,
	"reason": "",
	"policy": allowed[0].name,
	"message": sprintf("allowed by policy %q: %s:%d from %s%s", [allowed[0].name, net_host, net_port, input.exec.path, mode_note]),
	"endpoints": [e.id | some e in allowed],
} if {
	count(allowed) > 0
} else := {
	"allow": false,
	"reason": "binary_not_allowed",
	"policy": candidates[0].name,
	"message": sprintf("policy %q lists %s:%d but not binary %s nor its ancestors %v", [candidates[0].name, net_host, net_port, input.exec.path, input.exec.ancestors]),
	"endpoints": [],
} if {
	count(candidates) > 0
} else := {
	"allow": false,
	"reason": "endpoint_not_allowed",
	"policy": "-",
	"message": sprintf("no policy lists %s:%d%s", [net_host, net_port, mode_note]),
	"endpoints": [],
}

dns_name := input.dns.name

dns_policies := array.concat(
	[e.name | some e in data.stockade.hosts[dns_name]],
	[e.name | some e in data.stockade.wildcards[suffix(dns_name)]],
)

dns_decision := {
	"allow": true,
	"reason": "",
	"policy": dns_policies[0],
	"message": sprintf("%s is an endpoint host of policy %q", [dns_name, dns_policies[0]]),
	"endpoints": [],
} if {
	count(dns_policies) > 0
} else := {
	"allow": false,
	"reason": "policy_dns_ineligible",
	"policy": "-",
	"message": sprintf("%s is no endpoint host in any policy", [dns_name]),
	"endpoints": [],
}
`

// endpointInfo is what a decision reports about an allowing endpoint.
type endpointInfo struct {
	exact      bool
	allowedIPs []netip.Prefix
}

// compiled is a policy ready for evaluation: prepared queries over its
// data document, and the endpoint table the Rego entries index into.
type compiled struct {
	network   rego.PreparedEvalQuery
	dns       rego.PreparedEvalQuery
	endpoints []endpointInfo
}

// compile builds the data document of a policy and prepares the network
// and DNS queries once.
func compile(ctx context.Context, module *ast.Module, pol *Policy) (*compiled, error) {
	c := &compiled{}
	hosts, wildcards, binaries := ast.NewObject(), ast.NewObject(), ast.NewObject()
	globs := map[string]*glob.Pattern{}
	for pi, np := range pol.NetworkPolicies {
		exact, patterns := ast.NewObject(), []*ast.Term{}
		for _, b := range np.Binaries {
			if !b.Glob {
				exact.Insert(ast.StringTerm(b.Path), ast.InternedTerm(true))
				continue
			}
			g, err := glob.Compile(b.Path, '/')
			if err != nil {
				return nil, fmt.Errorf("compile binary glob %q: %w", b.Path, err)
			}
			globs[b.Path] = g
			patterns = append(patterns, ast.StringTerm(b.Path))
		}
		binaries.Insert(ast.StringTerm(strconv.Itoa(pi)), ast.ObjectTerm(
			ast.Item(ast.StringTerm("exact"), ast.NewTerm(exact)),
			ast.Item(ast.StringTerm("globs"), ast.ArrayTerm(patterns...)),
		))
		for _, ep := range np.Endpoints {
			ports := ast.NewSet()
			for _, port := range ep.Ports {
				ports.Add(ast.IntNumberTerm(int(port)))
			}
			entry := ast.ObjectTerm(
				ast.Item(ast.StringTerm("id"), ast.IntNumberTerm(len(c.endpoints))),
				ast.Item(ast.StringTerm("policy"), ast.StringTerm(strconv.Itoa(pi))),
				ast.Item(ast.StringTerm("name"), ast.StringTerm(np.Name)),
				ast.Item(ast.StringTerm("ports"), ast.NewTerm(ports)),
			)
			c.endpoints = append(c.endpoints, endpointInfo{exact: !ep.Wildcard, allowedIPs: ep.AllowedIPs})
			table, key := hosts, ep.Host
			if ep.Wildcard {
				table, key = wildcards, ep.Host[2:]
			}
			appendEntry(table, key, entry)
		}
	}
	exe, globT := ast.NewObject(), ast.NewObject()
	for pi, np := range pol.NetworkPolicies {
		var pats []*ast.Term
		for _, b := range np.Binaries {
			if b.Glob {
				pats = append(pats, ast.StringTerm(b.Path))
				continue
			}
			k := ast.StringTerm(b.Path)
			cur := exe.Get(k)
			if cur == nil {
				cur = ast.ObjectTerm()
				exe.Insert(k, cur)
			}
			cur.Value.(ast.Object).Insert(ast.StringTerm(strconv.Itoa(pi)), ast.InternedTerm(true))
		}
		globT.Insert(ast.StringTerm(strconv.Itoa(pi)), ast.ArrayTerm(pats...))
	}
	data := ast.NewObject(ast.Item(ast.StringTerm("stockade"), ast.ObjectTerm(
		ast.Item(ast.StringTerm("exe"), ast.NewTerm(exe)),
		ast.Item(ast.StringTerm("globs"), ast.NewTerm(globT)),
		ast.Item(ast.StringTerm("hosts"), ast.NewTerm(hosts)),
		ast.Item(ast.StringTerm("wildcards"), ast.NewTerm(wildcards)),
		ast.Item(ast.StringTerm("binaries"), ast.NewTerm(binaries)),
	)))
	store := inmem.NewFromASTObject(data)
	pathGlob := rego.Function2(&rego.Function{
		Name: "stockade.path_glob",
		Decl: types.NewFunction(types.Args(types.S, types.S), types.B),
	}, func(_ rego.BuiltinContext, pattern, path *ast.Term) (*ast.Term, error) {
		ps, ok1 := pattern.Value.(ast.String)
		s, ok2 := path.Value.(ast.String)
		g := globs[string(ps)]
		if !ok1 || !ok2 || g == nil {
			return nil, fmt.Errorf("stockade.path_glob(%v, %v): not a compiled pattern and a path", pattern, path)
		}
		return ast.InternedTerm(g.Match(string(s))), nil
	})
	prepare := func(query string) (rego.PreparedEvalQuery, error) {
		return rego.New(
			rego.Query(query),
			rego.ParsedModule(module),
			rego.Store(store),
			rego.StrictBuiltinErrors(true),
			pathGlob,
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

func appendEntry(table ast.Object, key string, entry *ast.Term) {
	k := ast.StringTerm(key)
	if cur := table.Get(k); cur != nil {
		table.Insert(k, ast.NewTerm(cur.Value.(*ast.Array).Append(entry)))
		return
	}
	table.Insert(k, ast.ArrayTerm(entry))
}

// parseModule parses the decision module; the engine does it once.
func parseModule() (*ast.Module, error) {
	m, err := ast.ParseModuleWithOpts("stockade/sandbox.rego", regoModule, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, fmt.Errorf("parse decision module: %w", err)
	}
	return m, nil
}
