package policy

// Load-time checks OpenShell makes (crates/openshell-policy: lib.rs
// validate_sandbox_policy, l7_validate.rs, ambiguity.rs) that the shape
// walk in parse.go does not: process identity, filesystem path limits,
// explicit-TCP host rules, L7 and credential field semantics and schema,
// and overlapping endpoints whose connection metadata disagrees. stockade
// does not enforce L7 or credentials; it checks them so that a policy
// OpenShell rejects is rejected here too.
//
// The checks walk the YAML nodes (not the parsed Policy) so every error has
// the position of the field at fault and so they need no field the shape
// walk drops.

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

const (
	// maxFilesystemPaths bounds read_only + read_write entries (OpenShell
	// MAX_FILESYSTEM_PATHS).
	maxFilesystemPaths = 256
	// maxPathBytes bounds one filesystem path (OpenShell MAX_PATH_LENGTH).
	maxPathBytes = 4096
	// maxSandboxID is the largest run_as_user / run_as_group number;
	// 2^32-1 is the "no identity" sentinel (OpenShell MAX_SANDBOX_UID).
	maxSandboxID = 1<<32 - 2
	// maxAmbiguityPairs bounds the endpoint pairs the ambiguity check
	// stands for (those OpenShell's pairwise check compares, counted in
	// validate_ambiguity.go), so a policy of many aliased endpoints fails
	// fast.
	maxAmbiguityPairs = 1_000_000
	// defaultBodyLimit is OpenShell's body limit when none is given.
	defaultBodyLimit = 65536
)

func l7RuleKeys() []string {
	return []string{"method", "path", "command", "query", "operation_type", "operation_name", "fields", "tool", "params"}
}

func mcpKeys() []string {
	return []string{"max_body_bytes", "strict_tool_names", "allow_all_known_mcp_methods"}
}

// deref follows aliases without charging the node budget (the shape walk
// has charged for these nodes already).
func deref(n *yaml.Node) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && hops < 64; hops++ {
		n = n.Alias
	}
	return n
}

// mapGet returns the key and value nodes of key in mapping n, or nils.
func mapGet(n *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := deref(n.Content[i]); k.Kind == yaml.ScalarNode && k.Value == key {
			return k, deref(n.Content[i+1])
		}
	}
	return nil, nil
}

// scalar returns a non-null scalar's text, "" otherwise.
func scalar(n *yaml.Node) string {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return ""
	}
	return n.Value
}

func isTrue(n *yaml.Node) bool {
	n = deref(n)
	var b bool
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" && n.Decode(&b) == nil && b
}

// validate runs the OpenShell load-time checks on the document root and
// keeps the endpoints as written in p.endpoints.
func (p *parser) validate(root *yaml.Node) {
	root = deref(root)
	if p.tooLarge || root == nil || root.Kind != yaml.MappingNode {
		return
	}
	_, proc := mapGet(root, "process")
	for _, key := range []string{"run_as_user", "run_as_group"} {
		if _, v := mapGet(proc, key); v != nil {
			p.checkIdentity(key, v)
		}
	}
	_, fs := mapGet(root, "filesystem_policy")
	p.checkPathLimits(fs)
	_, nps := mapGet(root, "network_policies")
	var eps []*rawEndpoint
	if nps != nil && nps.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(nps.Content); i += 2 {
			key := scalar(nps.Content[i])
			_, list := mapGet(nps.Content[i+1], "endpoints")
			if list == nil || list.Kind != yaml.SequenceNode {
				continue
			}
			for j, item := range list.Content {
				if item = deref(item); item.Kind == yaml.MappingNode {
					ep := p.rawEndpoint(key, j, item)
					p.checkEndpoint(ep)
					eps = append(eps, ep)
				}
			}
		}
	}
	// Overlapping endpoints that disagree (ambiguity.rs): one decision
	// would report another endpoint's tls or allowed_ips.
	if len(p.errs) == 0 {
		p.checkAmbiguity(eps)
	}
	p.endpoints = eps
}

// checkIdentity: lib.rs is_valid_sandbox_identity. "sandbox" or a number
// 1..2^32-2; root, 0, nobody and every other name are rejected.
func (p *parser) checkIdentity(key string, v *yaml.Node) {
	s := scalar(v)
	if s == "" || s == "sandbox" {
		return
	}
	if n, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 64); err == nil && n >= 1 && n <= maxSandboxID {
		return
	}
	p.errorf(v, "process.%s: %q is not allowed; write \"sandbox\" or a numeric ID in range [1, %d] (root, 0 and names such as nobody are rejected)", key, s, uint64(maxSandboxID))
}

// checkPathLimits: lib.rs MAX_FILESYSTEM_PATHS and MAX_PATH_LENGTH.
func (p *parser) checkPathLimits(fs *yaml.Node) {
	count := 0
	var over *yaml.Node
	for _, key := range []string{"read_only", "read_write"} {
		_, list := mapGet(fs, key)
		if list == nil || list.Kind != yaml.SequenceNode {
			continue
		}
		for _, item := range list.Content {
			item = deref(item)
			if count++; count == maxFilesystemPaths+1 {
				over = item
			}
			if s := scalar(item); len(s) > maxPathBytes {
				p.errorf(item, "filesystem_policy.%s: path is %d bytes, over the limit of %d; shorten it", key, len(s), maxPathBytes)
			}
		}
	}
	if over != nil {
		p.errorf(over, "filesystem_policy: too many paths (%d > %d); list at most %d read_only and read_write paths in all, e.g. a parent directory instead of its children", count, maxFilesystemPaths, maxFilesystemPaths)
	}
}

// rawEndpoint is one endpoint mapping as written, for the checks below.
type rawEndpoint struct {
	policy string
	index  int
	node   *yaml.Node
	keys   map[string]*yaml.Node // field -> key node
	vals   map[string]*yaml.Node // field -> value node
}

func (p *parser) rawEndpoint(policy string, index int, n *yaml.Node) *rawEndpoint {
	ep := &rawEndpoint{policy: policy, index: index, node: n, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := deref(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			continue
		}
		if _, dup := ep.keys[k.Value]; !dup {
			ep.keys[k.Value], ep.vals[k.Value] = k, deref(n.Content[i+1])
		}
	}
	return ep
}

func (ep *rawEndpoint) str(key string) string { return scalar(ep.vals[key]) }
func (ep *rawEndpoint) flag(key string) bool  { return isTrue(ep.vals[key]) }

// list returns the items of a list field (nil when absent or not a list).
func (ep *rawEndpoint) list(key string) []*yaml.Node {
	if v := ep.vals[key]; v != nil && v.Kind == yaml.SequenceNode {
		return v.Content
	}
	return nil
}

// at is the node errors about key are reported at: its key when present,
// else the endpoint.
func (ep *rawEndpoint) at(key string) *yaml.Node {
	if k := ep.keys[key]; k != nil {
		return k
	}
	return ep.node
}

// uint returns an integer scalar's value, 0 for anything else.
func (ep *rawEndpoint) uint(v *yaml.Node) int64 {
	var n int64
	if v = deref(v); v == nil || v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		return 0
	}
	if n, ok := plainDecimal(v.Value); ok {
		return n // what Decode returns, without its reflection
	}
	if v.Decode(&n) == nil {
		return n
	}
	return 0
}

// plainDecimal parses a decimal without sign, '_' or leading zero (YAML
// reads "0443" as octal) of at most 18 digits: an !!int scalar that
// yaml.v3 decodes with strconv.ParseInt(s, 0, 64), that is in base 10.
func plainDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := int64(0)
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}

// jsonRPCBodyLimit: lib.rs json_rpc_max_body_bytes (the mcp stanza wins).
func (ep *rawEndpoint) jsonRPCBodyLimit() int64 {
	if m := ep.vals["mcp"]; m != nil && !isNull(m) {
		_, v := mapGet(m, "max_body_bytes")
		return ep.uint(v)
	}
	_, v := mapGet(ep.vals["json_rpc"], "max_body_bytes")
	return ep.uint(v)
}

// mcpOption returns an mcp boolean option and whether it is set.
func (ep *rawEndpoint) mcpOption(key string) (value, set bool) {
	_, v := mapGet(ep.vals["mcp"], key)
	if v == nil || isNull(v) {
		return false, false
	}
	return isTrue(v), true
}

// mcpOptionsSet: lib.rs mcp_options is Some only when an option is set.
func (ep *rawEndpoint) mcpOptionsSet() bool {
	_, strict := ep.mcpOption("strict_tool_names")
	_, all := ep.mcpOption("allow_all_known_mcp_methods")
	return strict || all
}

func isL7Protocol(lower string) bool {
	switch lower {
	case "rest", "websocket", "graphql", "sql", "json-rpc", "mcp":
		return true
	}
	return false
}

func validOperationType(s string) bool {
	return s == "query" || s == "mutation" || s == "subscription"
}

// checkEndpoint runs the per-endpoint checks of lib.rs
// validate_sandbox_policy and l7_validate.rs, and the schema of the nested
// L7 and credential fields (deny_unknown_fields in lib.rs).
func (p *parser) checkEndpoint(ep *rawEndpoint) {
	p.checkL7Schema(ep)

	protocol := ep.str("protocol")
	lower := strings.ToLower(protocol)
	l7 := isL7Protocol(lower)
	tcp := lower == "tcp"
	mcp, jsonrpc := lower == "mcp", lower == "json-rpc"
	access := ep.str("access")
	rules, denyRules := ep.list("rules"), ep.list("deny_rules")
	hasRules, hasDeny := len(rules) > 0, len(denyRules) > 0
	allowAll, _ := ep.mcpOption("allow_all_known_mcp_methods")
	protoAt := ep.at("protocol")

	// Explicit TCP hosts (lib.rs: MissingTcpEndpointHost,
	// TcpEndpointIpLiteral, validate_tcp_dns_host_selector).
	if tcp {
		host := ep.str("host")
		hostAt := ep.vals["host"]
		if hostAt == nil {
			hostAt = ep.node
		}
		switch _, err := netip.ParseAddr(host); {
		case strings.TrimSpace(host) == "":
			p.errorf(hostAt, "protocol tcp requires a DNS host name; host-less allowed_ips endpoints work only without protocol: tcp")
		case err == nil:
			p.errorf(hostAt, "protocol tcp endpoint %q must use a DNS host name, not an IP literal; direct IP connections bypass policy DNS", host)
		case strings.TrimSpace(host) != host:
			p.errorf(hostAt, "protocol tcp endpoint %q: leading or trailing whitespace is not allowed", host)
		case strings.HasSuffix(host, "."):
			p.errorf(hostAt, "protocol tcp endpoint %q: omit the trailing DNS root dot", host)
		}
	}

	// l7_validate.rs validate_l7_endpoint_semantics, in its order.
	if protocol != "" && !l7 && !tcp {
		p.errorf(ep.vals["protocol"], "unknown protocol %q; valid protocols: tcp, rest, websocket, graphql, sql, json-rpc, mcp%s", protocol,
			suggest(lower, []string{"tcp", "rest", "websocket", "graphql", "sql", "json-rpc", "mcp"}))
	}
	if tcp && (access != "" || hasRules || hasDeny) {
		p.errorf(protoAt, "protocol tcp does not support access, rules, or deny_rules; remove those L7 fields or choose an L7 protocol")
	}
	if hasRules && access != "" {
		p.errorf(ep.at("access"), "rules and access are mutually exclusive; keep one of them")
	}
	if (mcp || jsonrpc) && access != "" {
		if mcp {
			p.errorf(ep.at("access"), "protocol %s does not support access presets; use rules/deny_rules or set mcp.allow_all_known_mcp_methods: true", protocol)
		} else {
			p.errorf(ep.at("access"), `protocol %s does not support access presets; use explicit rules with allow.method such as "*"`, protocol)
		}
	}
	if jsonrpc && !hasRules && access == "" {
		p.errorf(protoAt, "protocol %s requires explicit rules with allow.method", protocol)
	}
	if l7 && !mcp && !jsonrpc && !hasRules && access == "" {
		p.errorf(protoAt, "protocol %s requires rules or access to define allowed traffic", protocol)
	}
	if mcp && !hasRules && access == "" && !allowAll {
		p.errorf(protoAt, "protocol mcp requires rules when mcp.allow_all_known_mcp_methods is false; add rules or set it to true")
	}
	if hasRules && rulesDenyAll(rules) && !(mcp && allowAll) {
		p.errorf(ep.at("rules"), "rules would deny all traffic (no allow clause found); use access: full or add allow clauses to rules")
	}
	if hasDeny && !l7 {
		p.errorf(ep.at("deny_rules"), "deny_rules require an L7 protocol (rest, websocket, graphql, sql, json-rpc or mcp)")
	}
	if hasDeny && !mcp && !hasRules && access == "" {
		p.errorf(ep.at("deny_rules"), "deny_rules require rules or access to define the base allow set")
	}

	// lib.rs: fields explicit TCP does not support.
	if tcp {
		var extra []string
		for _, f := range []struct {
			key string
			set bool
		}{
			{"enforcement", ep.str("enforcement") != ""},
			{"path", ep.str("path") != ""},
			{"allow_encoded_slash", ep.flag("allow_encoded_slash")},
			{"websocket_credential_rewrite", ep.flag("websocket_credential_rewrite")},
			{"request_body_credential_rewrite", ep.flag("request_body_credential_rewrite")},
			{"persisted_queries", ep.str("persisted_queries") != ""},
			{"graphql_persisted_queries", len(mappingPairs(ep.vals["graphql_persisted_queries"])) > 0},
			{"graphql_max_body_bytes", ep.uint(ep.vals["graphql_max_body_bytes"]) > 0},
			{"json_rpc_max_body_bytes", ep.jsonRPCBodyLimit() > 0},
			{"mcp", ep.mcpOptionsSet()},
			// opa.rs proto_activation_rejects_explicit_tcp_credential_binding:
			// a native TCP stream carries no request to bind credentials to.
			{"credential_binding", ep.vals["credential_binding"] != nil},
		} {
			if f.set {
				extra = append(extra, f.key)
			}
		}
		if len(extra) > 0 {
			p.errorf(protoAt, "protocol tcp does not support L7-only fields: %s; remove those fields", strings.Join(extra, ", "))
		}
	}
	if path := ep.str("path"); path != "" && !strings.HasPrefix(path, "/") && path != "**" {
		p.errorf(ep.vals["path"], "path %q must start with '/' or be '**'", path)
	}
	if pq := ep.str("persisted_queries"); pq != "" && pq != "deny" && pq != "allow_registered" {
		p.errorf(ep.vals["persisted_queries"], "persisted_queries: invalid value %q; valid values: deny, allow_registered", pq)
	}
	if protocol == "sql" && ep.str("enforcement") == "enforce" {
		p.errorf(ep.at("enforcement"), "SQL enforcement requires full SQL parsing; use enforcement: audit")
	}
	if ep.mcpOptionsSet() && protocol != "mcp" {
		p.errorf(ep.at("mcp"), "mcp options are only valid for protocol mcp")
	}
	if protocol == "graphql" {
		for i, r := range rules {
			_, allow := mapGet(r, "allow")
			if _, v := mapGet(allow, "operation_type"); !validOperationType(scalar(v)) {
				p.errorf(deref(r), "rules[%d].allow.operation_type must be query, mutation, or subscription", i)
			}
		}
		for i, r := range denyRules {
			if _, v := mapGet(r, "operation_type"); !validOperationType(scalar(v)) {
				p.errorf(deref(r), "deny_rules[%d].operation_type must be query, mutation, or subscription", i)
			}
		}
		for _, kv := range mappingPairs(ep.vals["graphql_persisted_queries"]) {
			if _, v := mapGet(kv[1], "operation_type"); !validOperationType(scalar(v)) {
				p.errorf(kv[0], "graphql_persisted_queries[%s].operation_type must be query, mutation, or subscription", kv[0].Value)
			}
		}
	}

	// lib.rs: credential signing.
	if cs := ep.str("credential_signing"); cs != "" {
		if cs != "sigv4" && cs != "sigv4:body" && cs != "sigv4:no_body" {
			p.errorf(ep.vals["credential_signing"], "credential_signing: invalid value %q; valid values: sigv4, sigv4:body, sigv4:no_body", cs)
		}
		if ep.str("signing_service") == "" {
			p.errorf(ep.at("credential_signing"), "credential_signing needs signing_service (e.g. signing_service: bedrock)")
		}
		if ep.flag("request_body_credential_rewrite") {
			p.errorf(ep.at("request_body_credential_rewrite"), "credential_signing and request_body_credential_rewrite cannot both be set; a signed body cannot be rewritten")
		}
	}
}

// mappingPairs returns the (key, value) node pairs of a mapping.
func mappingPairs(n *yaml.Node) [][2]*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([][2]*yaml.Node, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{deref(n.Content[i]), deref(n.Content[i+1])})
	}
	return out
}

// rulesDenyAll: lib.rs rules_would_deny_all. Every rule's allow sets none
// of method, path, command, operation_type, operation_name, fields, params
// (tool counts as a param; query does not).
func rulesDenyAll(rules []*yaml.Node) bool {
	for _, r := range rules {
		_, allow := mapGet(r, "allow")
		for _, key := range []string{"method", "path", "command", "operation_type", "operation_name"} {
			if _, v := mapGet(allow, key); scalar(v) != "" {
				return false
			}
		}
		for _, key := range []string{"fields", "params", "tool"} {
			if _, v := mapGet(allow, key); v != nil && !isNull(v) && (v.Kind != yaml.SequenceNode || len(v.Content) > 0) && (v.Kind != yaml.MappingNode || len(v.Content) > 0) {
				return false
			}
		}
	}
	return true
}

// checkL7Schema checks the nested L7 and credential fields against
// OpenShell's schema (lib.rs L7RuleDef, L7AllowDef, L7DenyRuleDef,
// JsonRpcConfigDef, McpConfigDef, GraphqlOperationDef,
// NetworkCredentialBindingDef; all deny_unknown_fields).
func (p *parser) checkL7Schema(ep *rawEndpoint) {
	if v := ep.vals["rules"]; v != nil && v.Kind == yaml.SequenceNode {
		for i, item := range v.Content {
			what := fmt.Sprintf("rules[%d]", i)
			sawAllow := false
			if p.mapping(item, what, []string{"allow"}, func(_ string, _, v *yaml.Node) {
				sawAllow = true
				p.matcherFields(v, what+".allow")
			}) && !sawAllow {
				p.errorf(deref(item), "%s has no allow; write - allow: {method: GET, path: /x}", what)
			} else if isNull(deref(item)) {
				p.errorf(deref(item), "%s is empty; write - allow: {method: GET, path: /x}", what)
			}
		}
	}
	if v := ep.vals["deny_rules"]; v != nil && v.Kind == yaml.SequenceNode {
		for i, item := range v.Content {
			if isNull(deref(item)) {
				p.errorf(deref(item), "deny_rules[%d] is empty; write - {method: POST, path: /x}", i)
				continue
			}
			p.matcherFields(item, fmt.Sprintf("deny_rules[%d]", i))
		}
	}
	if v := ep.vals["json_rpc"]; v != nil && v.Kind == yaml.MappingNode {
		p.mapping(v, "json_rpc", []string{"max_body_bytes"}, func(_ string, _, v *yaml.Node) {
			p.u32(v, "json_rpc.max_body_bytes")
		})
	}
	if v := ep.vals["mcp"]; v != nil && v.Kind == yaml.MappingNode {
		p.mapping(v, "mcp", mcpKeys(), func(key string, _, v *yaml.Node) {
			if key == "max_body_bytes" {
				p.u32(v, "mcp.max_body_bytes")
			} else if !isNull(deref(v)) {
				p.boolean(v, "mcp."+key)
			}
		})
	}
	if v := ep.vals["graphql_persisted_queries"]; v != nil && v.Kind == yaml.MappingNode {
		for _, kv := range mappingPairs(v) {
			what := fmt.Sprintf("graphql_persisted_queries[%s]", kv[0].Value)
			p.mapping(kv[1], what, []string{"operation_type", "operation_name", "fields"}, func(key string, _, v *yaml.Node) {
				p.stringOrList(key, v, what)
			})
		}
	}
	if v := ep.vals["graphql_max_body_bytes"]; v != nil && v.ShortTag() == "!!int" {
		p.u32(v, "graphql_max_body_bytes") // the shape walk reports a non-integer
	}
	if v := ep.vals["credential_binding"]; v != nil && v.Kind == yaml.MappingNode {
		sawProvider := false
		if p.mapping(v, "credential_binding", []string{"provider"}, func(_ string, _, v *yaml.Node) {
			sawProvider = true
			p.str(v, "credential_binding.provider")
		}) && !sawProvider {
			p.errorf(v, "credential_binding has no provider; write credential_binding: {provider: NAME}")
		}
	}
}

// matcherFields checks an allow or deny_rules entry (L7AllowDef /
// L7DenyRuleDef).
func (p *parser) matcherFields(n *yaml.Node, what string) {
	p.mapping(n, what, l7RuleKeys(), func(key string, _, v *yaml.Node) {
		switch key {
		case "query":
			p.mapping(v, what+".query", nil, func(name string, _, v *yaml.Node) {
				p.queryMatcher(v, what+".query."+name)
			})
		case "tool":
			p.queryMatcher(v, what+".tool")
		case "params":
			p.paramMatchers(v, what+".params", 0)
		default:
			p.stringOrList(key, v, what)
		}
	})
}

// stringOrList checks "fields" (a list of strings) or any other string key.
func (p *parser) stringOrList(key string, v *yaml.Node, what string) {
	if isNull(deref(v)) {
		return
	}
	if key == "fields" {
		p.seq(v, what+".fields", func(item *yaml.Node) { p.str(item, what+".fields entry") })
		return
	}
	p.str(v, what+"."+key)
}

// queryMatcher: lib.rs QueryMatcherDef, a glob string or {any: [globs]}.
func (p *parser) queryMatcher(v *yaml.Node, what string) {
	v = deref(v)
	if v.Kind == yaml.MappingNode {
		p.mapping(v, what, []string{"any"}, func(_ string, _, v *yaml.Node) {
			p.seq(v, what+".any", func(item *yaml.Node) { p.str(item, what+".any entry") })
		})
		return
	}
	p.str(v, what)
}

// paramMatchers: lib.rs ParamMatcherDef, a matcher or a nested mapping of
// matchers (a mapping whose only key is "any" is a matcher).
func (p *parser) paramMatchers(v *yaml.Node, what string, depth int) {
	v = deref(v)
	if depth > 32 {
		p.errorf(v, "%s: nested too deeply", what)
		return
	}
	p.mapping(v, what, nil, func(name string, _, v *yaml.Node) {
		v = deref(v)
		if v.Kind != yaml.MappingNode {
			p.queryMatcher(v, what+"."+name)
			return
		}
		if k, _ := mapGet(v, "any"); k != nil && len(v.Content) == 2 {
			p.queryMatcher(v, what+"."+name)
			return
		}
		p.paramMatchers(v, what+"."+name, depth+1)
	})
}

// u32 checks a non-negative integer that fits 32 bits.
func (p *parser) u32(v *yaml.Node, what string) {
	if isNull(deref(v)) {
		return
	}
	if n, ok := p.integer(v, what); ok && (n < 0 || n > 1<<32-1) {
		p.errorf(v, "%s: %d out of range; valid values are 0-4294967295", what, n)
	}
}

func (ep *rawEndpoint) selector() string {
	host := ep.str("host")
	if host == "" {
		host = "<any host>"
	}
	return fmt.Sprintf("[%d] (%s%s)", ep.index, host, ep.str("path"))
}

// requestMetadata: ambiguity.rs endpoint_contributes_request_pipeline_metadata.
func (ep *rawEndpoint) requestMetadata() bool {
	proto := strings.ToLower(ep.str("protocol"))
	_, binding := ep.vals["credential_binding"]
	return (proto != "" && proto != "tcp") || len(ep.list("allowed_ips")) > 0 || ep.str("tls") != "" || (binding && !isNull(ep.vals["credential_binding"]))
}

func conflict(out []string, field string, l, r any) []string {
	if fmt.Sprint(l) != fmt.Sprint(r) {
		out = append(out, fmt.Sprintf("%s=%q vs %q", field, fmt.Sprint(l), fmt.Sprint(r)))
	}
	return out
}

func normalizedTLS(s string) string {
	if strings.EqualFold(s, "skip") {
		return "skip"
	}
	return "auto"
}

// normalizedIPs: ambiguity.rs normalized_strings (trimmed, lower-case,
// sorted, deduplicated text, as written).
func normalizedIPs(ep *rawEndpoint) string {
	var out []string
	for _, item := range ep.list("allowed_ips") {
		out = append(out, strings.ToLower(strings.TrimSpace(scalar(item))))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

func connectionConflicts(l, r *rawEndpoint) []string {
	var out []string
	out = conflict(out, "protocol tcp", strings.EqualFold(l.str("protocol"), "tcp"), strings.EqualFold(r.str("protocol"), "tcp"))
	out = conflict(out, "tls", normalizedTLS(l.str("tls")), normalizedTLS(r.str("tls")))
	out = conflict(out, "allowed_ips", normalizedIPs(l), normalizedIPs(r))
	return out
}

func requestProtocol(s string) string {
	if strings.EqualFold(s, "tcp") {
		return ""
	}
	return strings.ToLower(s)
}

func enforcementMode(s string) string {
	if strings.EqualFold(s, "enforce") {
		return "enforce"
	}
	return "audit"
}

func bodyLimit(n int64) int64 {
	if n == 0 {
		return defaultBodyLimit
	}
	return n
}

// websocketGraphQL: ambiguity.rs websocket_graphql_policy.
func websocketGraphQL(ep *rawEndpoint) bool {
	has := func(m *yaml.Node) bool {
		for _, key := range []string{"operation_type", "operation_name"} {
			if _, v := mapGet(m, key); scalar(v) != "" {
				return true
			}
		}
		_, v := mapGet(m, "fields")
		return v != nil && v.Kind == yaml.SequenceNode && len(v.Content) > 0
	}
	for _, r := range ep.list("rules") {
		if _, allow := mapGet(r, "allow"); has(allow) {
			return true
		}
	}
	for _, r := range ep.list("deny_rules") {
		if has(r) {
			return true
		}
	}
	pq := ep.str("persisted_queries")
	return len(mappingPairs(ep.vals["graphql_persisted_queries"])) > 0 || (pq != "" && pq != "deny")
}

func (ep *rawEndpoint) provider() string {
	_, v := mapGet(ep.vals["credential_binding"], "provider")
	return scalar(v)
}

// requestConflicts: ambiguity.rs request_pipeline_conflicts.
func requestConflicts(l, r *rawEndpoint) []string {
	var out []string
	lp, rp := l.str("protocol"), r.str("protocol")
	out = conflict(out, "protocol", requestProtocol(lp), requestProtocol(rp))
	out = conflict(out, "enforcement", enforcementMode(l.str("enforcement")), enforcementMode(r.str("enforcement")))
	for _, key := range []string{"allow_encoded_slash", "websocket_credential_rewrite", "request_body_credential_rewrite"} {
		out = conflict(out, key, l.flag(key), r.flag(key))
	}
	if strings.EqualFold(lp, "websocket") && strings.EqualFold(rp, "websocket") {
		out = conflict(out, "websocket graphql policy", websocketGraphQL(l), websocketGraphQL(r))
	}
	for _, key := range []string{"credential_signing", "signing_service", "signing_region"} {
		out = conflict(out, key, l.str(key), r.str(key))
	}
	out = conflict(out, "credential_binding.provider", l.provider(), r.provider())
	if strings.EqualFold(lp, "graphql") && strings.EqualFold(rp, "graphql") {
		out = conflict(out, "graphql_max_body_bytes", bodyLimit(l.uint(l.vals["graphql_max_body_bytes"])), bodyLimit(r.uint(r.vals["graphql_max_body_bytes"])))
	}
	if strings.EqualFold(lp, rp) && (strings.EqualFold(lp, "json-rpc") || strings.EqualFold(lp, "mcp")) {
		out = conflict(out, "max_body_bytes", bodyLimit(l.jsonRPCBodyLimit()), bodyLimit(r.jsonRPCBodyLimit()))
	}
	if strings.EqualFold(lp, "mcp") && strings.EqualFold(rp, "mcp") {
		ls, lset := l.mcpOption("strict_tool_names")
		rs, rset := r.mcpOption("strict_tool_names")
		out = conflict(out, "mcp.strict_tool_names", ls || !lset, rs || !rset)
	}
	return out
}

// hostPatternsOverlap: ambiguity.rs host_patterns_overlap. An empty host
// (host-less allowed_ips endpoint) overlaps every host; in a pattern "*"
// stays within a label and "**" crosses labels; everything else, "?"
// included, is literal there.
func hostPatternsOverlap(l, r string) bool {
	if l == "" || r == "" {
		return true
	}
	return globsOverlap(hostGlob(strings.TrimSuffix(l, ".")), hostGlob(strings.TrimSuffix(r, ".")), '.')
}

// pathPatternsOverlap: ambiguity.rs path_patterns_overlap. Both * and **
// cross '/' (glob's require_literal_separator is false); ? and [classes]
// match one character. An unparsable pattern overlaps everything.
func pathPatternsOverlap(l, r string) bool {
	if l == "" || r == "" || l == "**" || l == "/**" || r == "**" || r == "/**" {
		return true
	}
	lt, lok := pathGlob(l)
	rt, rok := pathGlob(r)
	if !lok || !rok {
		return true
	}
	return globsOverlap(lt, rt, '/')
}

// pathSpecificity: ambiguity.rs path_selector_specificity.
func pathSpecificity(path string) int {
	return len([]rune(strings.ReplaceAll(path, "*", "")))
}

// globToken is one element of a glob: a star, or a set of characters
// given as inclusive rune ranges (negated: every rune outside them).
type globToken struct {
	star    bool
	crosses bool // a star that also matches the delimiter
	ranges  [][2]rune
	negated bool
}

func literalToken(c rune) globToken { return globToken{ranges: [][2]rune{{c, c}}} }

func hostGlob(s string) []globToken {
	rs := []rune(s)
	var out []globToken
	for i := 0; i < len(rs); {
		if rs[i] != '*' {
			out = append(out, literalToken(rs[i]))
			i++
			continue
		}
		j := i
		for j < len(rs) && rs[j] == '*' {
			j++
		}
		out = append(out, globToken{star: true, crosses: j-i >= 2})
		i = j
	}
	return out
}

func pathGlob(s string) ([]globToken, bool) {
	rs := []rune(s)
	var out []globToken
	for i := 0; i < len(rs); {
		switch rs[i] {
		case '?':
			out = append(out, globToken{negated: true}) // any one rune
			i++
		case '*':
			j := i
			for j < len(rs) && rs[j] == '*' {
				j++
			}
			if j-i > 2 {
				return nil, false
			}
			if j-i == 2 {
				if (i > 0 && rs[i-1] != '/') || (j < len(rs) && rs[j] != '/') {
					return nil, false
				}
				if j < len(rs) {
					j++
				}
			}
			out = append(out, globToken{star: true, crosses: true})
			i = j
		case '[':
			neg := i+1 < len(rs) && rs[i+1] == '!'
			start := i + 1
			if neg {
				start++
			}
			end := slices.Index(rs[min(start, len(rs)):], ']')
			if end <= 0 {
				return nil, false
			}
			body := rs[start : start+end]
			t := globToken{negated: neg}
			for k := 0; k < len(body); {
				if k+2 < len(body) && body[k+1] == '-' {
					if body[k] <= body[k+2] {
						t.ranges = append(t.ranges, [2]rune{body[k], body[k+2]})
					}
					k += 3
				} else {
					t.ranges = append(t.ranges, [2]rune{body[k], body[k]})
					k++
				}
			}
			out = append(out, t)
			i = start + end + 1
		default:
			out = append(out, literalToken(rs[i]))
			i++
		}
	}
	return out, true
}

// matches says whether token t (not a star) matches rune c.
func (t globToken) matches(c rune) bool {
	in := false
	for _, r := range t.ranges {
		if c >= r[0] && c <= r[1] {
			in = true
			break
		}
	}
	return in != t.negated
}

// share says whether some rune is matched by both tokens (a star matches
// any rune but, when it does not cross, the delimiter).
func share(a, b globToken, delim rune) bool {
	// Candidate runes: the range ends of each token and their neighbours,
	// the delimiter and one rune outside every range. Two rune sets built
	// from ranges intersect iff they share one of these.
	cands := []rune{delim, delim - 1, delim + 1, 'x', 0x10FFFF, 0}
	for _, t := range []globToken{a, b} {
		for _, r := range t.ranges {
			cands = append(cands, r[0], r[1], r[0]-1, r[1]+1)
		}
	}
	ok := func(t globToken, c rune) bool {
		if t.star {
			return t.crosses || c != delim
		}
		return t.matches(c)
	}
	for _, c := range cands {
		if c >= 0 && c <= 0x10FFFF && ok(a, c) && ok(b, c) {
			return true
		}
	}
	return false
}

// globsOverlap decides whether two glob languages intersect with a search
// over pairs of positions (ambiguity.rs token_languages_overlap).
func globsOverlap(l, r []globToken, delim rune) bool {
	type state struct{ i, j int }
	seen := map[state]bool{}
	queue := []state{{0, 0}}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if seen[s] {
			continue
		}
		seen[s] = true
		if s.i == len(l) && s.j == len(r) {
			return true
		}
		if s.i < len(l) && l[s.i].star {
			queue = append(queue, state{s.i + 1, s.j})
		}
		if s.j < len(r) && r[s.j].star {
			queue = append(queue, state{s.i, s.j + 1})
		}
		if s.i >= len(l) || s.j >= len(r) || !share(l[s.i], r[s.j], delim) {
			continue
		}
		next := s
		if !l[s.i].star {
			next.i++
		}
		if !r[s.j].star {
			next.j++
		}
		queue = append(queue, next)
	}
	return false
}
