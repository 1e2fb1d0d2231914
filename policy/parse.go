package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/gobwas/glob"
	"gopkg.in/yaml.v3"
)

// maxNodes bounds the YAML nodes the parser visits, aliases expanded, so a
// file of nested aliases ("billion laughs") fails fast instead of looping.
const maxNodes = 200_000

// Valid keys per section, in the order error messages list them.
func topKeys() []string {
	return []string{"version", "filesystem_policy", "landlock", "process", "network_policies", "network_middlewares", "stockade"}
}

// stockadeKeys are the keys of the "stockade" section: stockade's own
// extensions, which OpenShell's schema does not have.
func stockadeKeys() []string { return []string{"allow_ptrace"} }

func filesystemKeys() []string { return []string{"include_workdir", "read_only", "read_write"} }
func landlockKeys() []string   { return []string{"compatibility"} }
func processKeys() []string    { return []string{"run_as_user", "run_as_group"} }
func netPolicyKeys() []string  { return []string{"name", "endpoints", "binaries"} }
func binaryKeys() []string     { return []string{"path", "harness"} }

func endpointKeys() []string {
	return []string{
		"host", "port", "ports", "allowed_ips", "protocol", "tls", "enforcement", "access",
		"rules", "deny_rules", "path", "allow_encoded_slash", "websocket_credential_rewrite",
		"request_body_credential_rewrite", "allow_uninspected_credentials", "persisted_queries",
		"graphql_persisted_queries", "graphql_max_body_bytes", "credential_signing",
		"signing_service", "signing_region", "json_rpc", "mcp", "credential_binding",
	}
}

// valueKind is the YAML shape an accepted-but-unenforced field must have.
type valueKind int

const (
	kindAny    valueKind = 0
	kindString valueKind = 1
	kindBool   valueKind = 2
	kindInt    valueKind = 3
	kindList   valueKind = 4
	kindMap    valueKind = 5
)

func (k valueKind) String() string {
	switch k {
	case kindString:
		return "a string"
	case kindBool:
		return "a boolean"
	case kindInt:
		return "an integer"
	case kindList:
		return "a list"
	case kindMap:
		return "a mapping"
	case kindAny:
		return "any value"
	default:
		return fmt.Sprintf("kind(%d)", int(k))
	}
}

// unenforcedField says how to check an endpoint field stockade keeps but
// does not enforce, and what the "not enforced" notice says about it.
type unenforcedField struct {
	kind valueKind
	why  string
}

func unenforcedEndpointField(key string) unenforcedField {
	const l7 = "L7 inspection is not implemented; the whole host:port is reachable for allowed binaries"
	const cred = "credential injection/rewriting is not implemented"
	switch key {
	case "protocol", "enforcement", "access", "path", "persisted_queries":
		return unenforcedField{kindString, l7}
	case "rules", "deny_rules":
		return unenforcedField{kindList, l7}
	case "graphql_persisted_queries", "json_rpc", "mcp":
		return unenforcedField{kindMap, l7}
	case "allow_encoded_slash":
		return unenforcedField{kindBool, l7}
	case "graphql_max_body_bytes":
		return unenforcedField{kindInt, l7}
	case "tls":
		return unenforcedField{kindString, "TLS is passed through, never terminated"}
	case "credential_signing", "signing_service", "signing_region":
		return unenforcedField{kindString, cred}
	case "credential_binding":
		return unenforcedField{kindMap, cred}
	case "websocket_credential_rewrite", "request_body_credential_rewrite", "allow_uninspected_credentials":
		return unenforcedField{kindBool, cred}
	default:
		return unenforcedField{kindAny, "not implemented"}
	}
}

// Parse parses and validates an OpenShell v1 policy. file names the policy
// in positions. On failure the error is an ErrorList holding every error
// found in the file, each with file:line:col, sorted by position.
func Parse(file string, data []byte) (*Policy, error) {
	p := &parser{file: file}
	pol := p.parse(data)
	slices.SortStableFunc(p.errs, func(a, b *Error) int { return cmp.Or(a.Line-b.Line, a.Col-b.Col) })
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	slices.SortStableFunc(p.notices, func(a, b Notice) int { return cmp.Or(a.Line-b.Line, a.Col-b.Col) })
	pol.notices = p.notices
	return pol, nil
}

type parser struct {
	file     string
	errs     ErrorList
	notices  []Notice
	nodes    int
	tooLarge bool
	// endpoints as written, for the ambiguity check (validate.go).
	endpoints []*rawEndpoint
}

func (p *parser) errorf(n *yaml.Node, format string, a ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, a...)})
}

func (p *parser) notef(n *yaml.Node, format string, a ...any) {
	p.notices = append(p.notices, Notice{File: p.file, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, a...)})
}

// yamlError turns a yaml.v3 syntax error ("yaml: line 3: msg") into an
// Error at the line that is wrong; yaml.v3 reports a line but no column.
func (p *parser) yamlError(data []byte, err error) {
	e := &Error{File: p.file, Line: 1, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	if rest, ok := strings.CutPrefix(e.Msg, "line "); ok {
		if num, msg, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				e.Line, e.Msg = n, msg
			}
		}
	}
	if n := firstBadLine(data); n > 0 {
		e.Line = n
	}
	p.errs = append(p.errs, e)
}

// badLineBudget bounds the bytes firstBadLine parses in all (a policy is
// a few KB; a huge file keeps yaml.v3's own line).
const badLineBudget = 8 << 20

// firstBadLine finds the line a YAML syntax error is on, 0 when it cannot
// tell within badLineBudget.
//
// yaml.v3 names the line of the error's context, not of the problem: for
// libyaml's "did not find expected key" that is where the enclosing block
// mapping starts (minus one), so a mis-indented key on line 7 under a
// mapping begun on line 4 is reported at line 3, and a tab is reported one
// line early. Its problem position is not exported. So the document is
// parsed again, cut after ever fewer lines: the wrong line is the first
// line L such that every prefix of L or more lines fails. (The first
// failing prefix alone could be too early: a prefix that cuts a flow list
// or a quoted string spanning lines fails too, and a longer one parses.)
func firstBadLine(data []byte) int {
	ends := []int{} // ends[i]: the end offset of line i+1, its newline included
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	spent, bad := 0, 0
	for l := len(ends); l >= 1; l-- {
		if spent += ends[l-1]; spent > badLineBudget {
			return 0
		}
		if parsesYAML(data[:ends[l-1]]) {
			break
		}
		bad = l
	}
	return bad
}

// parsesYAML says whether every document of data parses (syntax only).
func parsesYAML(data []byte) bool {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

func (p *parser) parse(data []byte) *Policy {
	pol := &Policy{File: p.file, Landlock: Landlock{Compatibility: BestEffort}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errs = append(p.errs, &Error{File: p.file, Line: 1, Col: 1, Msg: `empty policy; a policy needs at least "version: 1"`})
		} else {
			p.yamlError(data, err)
		}
		return pol
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "a policy file holds one YAML document; found another one here")
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(data, err)
	}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if isNull(p.resolve(root)) {
		p.errorf(root, `empty policy; a policy needs at least "version: 1"`)
		return pol
	}
	sawVersion := false
	p.mapping(root, "policy", topKeys(), func(key string, k, v *yaml.Node) {
		switch key {
		case "version":
			sawVersion = true
			if n, ok := p.integer(v, "version"); ok {
				if n != 1 {
					p.errorf(v, "unsupported version %d; the only valid version is 1", n)
				}
				pol.Version = int(n)
			}
		case "filesystem_policy":
			pol.Filesystem = p.filesystem(v)
		case "landlock":
			p.mapping(v, "landlock", landlockKeys(), func(_ string, _, v *yaml.Node) {
				s, ok := p.str(v, "landlock.compatibility")
				switch {
				case !ok:
				case s == "best_effort":
					pol.Landlock.Compatibility = BestEffort
				case s == "hard_requirement":
					pol.Landlock.Compatibility = HardRequirement
				default:
					p.errorf(v, "landlock.compatibility: invalid value %q; valid values: best_effort, hard_requirement", s)
				}
			})
		case "process":
			p.mapping(v, "process", processKeys(), func(key string, _, v *yaml.Node) {
				s, _ := p.str(v, "process."+key)
				if key == "run_as_user" {
					pol.Process.RunAsUser = s
				} else {
					pol.Process.RunAsGroup = s
				}
			})
		case "network_policies":
			p.mapping(v, "network_policies", nil, func(key string, k, v *yaml.Node) {
				if np := p.networkPolicy(key, k, v); np != nil {
					pol.NetworkPolicies = append(pol.NetworkPolicies, np)
				}
			})
		case "stockade":
			p.mapping(v, "stockade", stockadeKeys(), func(_ string, k, v *yaml.Node) {
				if b, ok := p.boolean(v, "stockade.allow_ptrace"); ok {
					pol.Stockade.AllowPtrace = b
					pol.Stockade.AllowPtraceAt = Position{Line: k.Line, Col: k.Column}
				}
			})
		case "network_middlewares":
			p.mapping(v, "network_middlewares", nil, func(key string, k, v *yaml.Node) {
				if f, ok := p.keep(key, k, v, kindMap); ok {
					pol.Middlewares = append(pol.Middlewares, f)
					p.notef(k, "network_middlewares.%s accepted, not enforced: middlewares are not implemented", key)
				}
			})
		}
	})
	p.validate(root) // OpenShell's load-time checks: validate.go
	if !sawVersion && p.resolve(root).Kind == yaml.MappingNode {
		p.errorf(root, `missing required key "version"; the only valid version is 1`)
	}
	return pol
}

func (p *parser) filesystem(n *yaml.Node) *FilesystemPolicy {
	fs := &FilesystemPolicy{}
	if !p.mapping(n, "filesystem_policy", filesystemKeys(), func(key string, _, v *yaml.Node) {
		switch key {
		case "include_workdir":
			fs.IncludeWorkdir, _ = p.boolean(v, "filesystem_policy.include_workdir")
		case "read_only":
			fs.ReadOnly = p.paths(v, "filesystem_policy.read_only", false)
		case "read_write":
			fs.ReadWrite = p.paths(v, "filesystem_policy.read_write", true)
		}
	}) {
		return nil
	}
	return fs
}

func (p *parser) paths(n *yaml.Node, what string, writable bool) []string {
	var out []string
	p.seq(n, what, func(item *yaml.Node) {
		s, ok := p.str(item, what+" entry")
		if !ok {
			return
		}
		if msg := checkPath(s); msg != "" {
			p.errorf(item, "%s: %s", what, msg)
			return
		}
		if writable && strings.TrimRight(s, "/") == "" {
			p.errorf(item, `%s: "/" would make the whole filesystem writable; list the directories the workload needs, e.g. /sandbox`, what)
			return
		}
		out = append(out, s)
	})
	return out
}

// checkPath returns why s is not an acceptable absolute path, or "".
func checkPath(s string) string {
	switch {
	case s == "":
		return "empty path"
	case !strings.HasPrefix(s, "/"):
		return fmt.Sprintf("relative path %q; paths must be absolute (start with /)", s)
	case strings.ContainsRune(s, 0):
		return fmt.Sprintf("path %q contains a NUL byte", s)
	}
	for _, part := range strings.Split(s, "/") {
		if part == ".." {
			return fmt.Sprintf(`path %q contains ".."; write the path without parent components`, s)
		}
	}
	return ""
}

func (p *parser) networkPolicy(key string, k, v *yaml.Node) *NetworkPolicy {
	np := &NetworkPolicy{Key: key, Name: key, Line: k.Line, Col: k.Column}
	what := fmt.Sprintf("network policy %q", key)
	sawEndpoints, sawBinaries := false, false
	if isNull(p.resolve(v)) {
		p.errorf(k, "%s is empty; it needs endpoints and binaries", what)
		return nil
	}
	if !p.mapping(v, what, netPolicyKeys(), func(field string, _, v *yaml.Node) {
		switch field {
		case "name":
			if s, ok := p.str(v, what+" name"); ok && s != "" {
				np.Name = s
			}
		case "endpoints":
			p.seq(v, what+" endpoints", func(item *yaml.Node) {
				sawEndpoints = true
				if ep := p.endpoint(item); ep != nil {
					np.Endpoints = append(np.Endpoints, ep)
				}
			})
		case "binaries":
			p.seq(v, what+" binaries", func(item *yaml.Node) {
				sawBinaries = true
				if b, ok := p.binary(item); ok {
					np.Binaries = append(np.Binaries, b)
				}
			})
		}
	}) {
		return nil
	}
	if !sawEndpoints {
		p.errorf(k, "%s has no endpoints; add at least one {host: ..., port: ...}", what)
	}
	if !sawBinaries {
		p.notef(k, "%s has no binaries: no process may use its endpoints (denied binary_not_allowed) except with --identity none; its hosts stay DNS-eligible", what)
	}
	return np
}

func (p *parser) binary(n *yaml.Node) (Binary, bool) {
	b := Binary{Line: n.Line, Col: n.Column}
	if isNull(n) {
		p.errorf(n, "binary entry is empty; write {path: /usr/bin/curl}")
		return b, false
	}
	sawPath := false
	p.mapping(n, "binary", binaryKeys(), func(key string, k, v *yaml.Node) {
		switch key {
		case "path":
			sawPath = true
			s, ok := p.str(v, "binary path")
			if !ok {
				return
			}
			if msg := checkPath(s); msg != "" {
				p.errorf(v, "binary path: %s", msg)
				return
			}
			if strings.Contains(s, "*") {
				if _, err := glob.Compile(s, '/'); err != nil {
					p.errorf(v, "binary path %q is not a valid glob (* within one segment, ** across segments): %v", s, err)
					return
				}
				b.Glob = true
			}
			b.Path = s
		case "harness":
			if _, ok := p.boolean(v, "binary harness"); ok {
				p.notef(k, "harness accepted, not enforced: deprecated and ignored (as in OpenShell)")
			}
		}
	})
	if !sawPath && n.Kind == yaml.MappingNode {
		p.errorf(n, "binary has no path; write {path: /usr/bin/curl}")
	}
	return b, b.Path != ""
}

func (p *parser) endpoint(n *yaml.Node) *Endpoint {
	ep := &Endpoint{Line: n.Line, Col: n.Column}
	if isNull(n) {
		p.errorf(n, "endpoint entry is empty; write {host: api.example.com, port: 443}")
		return nil
	}
	var hostNode, portNode, portsNode *yaml.Node
	bad := false
	ok := p.mapping(n, "endpoint", endpointKeys(), func(key string, k, v *yaml.Node) {
		switch key {
		case "host":
			hostNode = k
			s, ok := p.str(v, "host")
			if !ok {
				bad = true
				return
			}
			host, wild, msg := checkHost(s)
			if msg != "" {
				p.errorf(v, "%s", msg)
				bad = true
				return
			}
			ep.Host, ep.Wildcard = host, wild
		case "port":
			portNode = k
			if port, ok := p.port(v); ok {
				ep.Ports = appendPort(ep.Ports, port)
			}
		case "ports":
			portsNode = k
			p.seq(v, "ports", func(item *yaml.Node) {
				if port, ok := p.port(item); ok {
					ep.Ports = appendPort(ep.Ports, port)
				}
			})
		case "allowed_ips":
			p.seq(v, "allowed_ips", func(item *yaml.Node) {
				if pfx, ok := p.cidr(item); ok {
					ep.AllowedIPs = append(ep.AllowedIPs, pfx)
				}
			})
		default:
			spec := unenforcedEndpointField(key)
			f, ok := p.keep(key, k, v, spec.kind)
			if !ok {
				return
			}
			s, _ := f.Value.(string)
			switch key {
			case "protocol":
				ep.Protocol = s
				if s == "tcp" {
					return // plain TCP is exactly what the boundary enforces
				}
			case "tls":
				ep.TLS = s
			case "enforcement":
				ep.Enforcement = s
			case "access":
				ep.Access = s
			default:
				ep.Unenforced = append(ep.Unenforced, f)
			}
			p.notef(k, "%s accepted, not enforced: %s", describeField(key, f.Value), spec.why)
		}
	})
	if !ok {
		return nil
	}
	if hostNode == nil && len(ep.AllowedIPs) == 0 {
		// Without a host, allowed_ips alone says which destinations are
		// reachable: any name on the endpoint's ports (as OpenShell).
		p.errorf(n, "endpoint has no host; name the host, or give allowed_ips to allow any name whose addresses are in them")
		bad = true
	}
	switch {
	case portNode != nil && portsNode != nil:
		p.errorf(portsNode, "endpoint has both port and ports; use one of them")
		bad = true
	case portNode == nil && portsNode == nil:
		p.errorf(n, "endpoint has no port; add port: 443 or ports: [80, 443]")
		bad = true
	case portsNode != nil && len(ep.Ports) == 0:
		p.errorf(portsNode, "ports is empty; list at least one port 1-65535")
		bad = true
	}
	if bad {
		return nil
	}
	return ep
}

func describeField(key string, v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%s: %s", key, s)
	}
	return key
}

func appendPort(ports []uint16, port uint16) []uint16 {
	for _, q := range ports {
		if q == port {
			return ports
		}
	}
	return append(ports, port)
}

func (p *parser) port(n *yaml.Node) (uint16, bool) {
	v, ok := p.integer(n, "port")
	if !ok {
		return 0, false
	}
	if v < 1 || v > 65535 {
		p.errorf(n, "port %d out of range; valid ports are 1-65535", v)
		return 0, false
	}
	return uint16(v), true
}

func (p *parser) cidr(n *yaml.Node) (netip.Prefix, bool) {
	s, ok := p.str(n, "allowed_ips entry")
	if !ok {
		return netip.Prefix{}, false
	}
	pfx, err := netip.ParsePrefix(s)
	if a, aerr := netip.ParseAddr(s); err != nil && aerr == nil && a.Zone() == "" {
		pfx, err = a.Prefix(a.BitLen()) // a bare address is a /32 or /128 (as OpenShell)
	}
	if err != nil {
		p.errorf(n, "allowed_ips: %q is not a CIDR or an IP address; write e.g. 10.0.0.0/8 or 10.1.2.3", s)
		return netip.Prefix{}, false
	}
	pfx = pfx.Masked()
	for _, lo := range []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("::ffff:127.0.0.0/104"),
	} {
		if pfx.Overlaps(lo) {
			p.errorf(n, "allowed_ips: %s overlaps loopback %s; loopback destinations cannot be allowed by policy", pfx, lo)
			return netip.Prefix{}, false
		}
	}
	return pfx, true
}

// checkHost validates and normalises an endpoint host. It returns the
// lower-case host without a trailing dot, whether it is a host pattern
// (OpenShell's language, see hostPattern), or a message saying what is wrong.
func checkHost(s string) (string, bool, string) {
	h := strings.ToLower(strings.TrimSuffix(s, "."))
	switch {
	case h == "":
		return "", false, "host is empty; name a host such as api.example.com"
	case strings.Contains(h, "://") || strings.Contains(h, "/"):
		return "", false, fmt.Sprintf("host %q must be a bare host name, not a URL; write e.g. api.example.com", s)
	case h == "*" || h == "**":
		return "", false, fmt.Sprintf("host %q would allow every host; name the hosts or use a wildcard such as *.example.com", s)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", false, fmt.Sprintf("host %q: an address with a zone is not allowed", s)
		}
		return a.String(), false, ""
	}
	if strings.Contains(h, ":") {
		return "", false, fmt.Sprintf("host %q must not carry a port; use port: or ports:", s)
	}
	// OpenShell treats a host as a pattern only when it has a '*' (its Rego
	// compares any other host literally), so '?' and '[' need one too.
	wild := strings.Contains(h, "*")
	if !wild && strings.ContainsAny(h, "?[]!") {
		return "", false, fmt.Sprintf("host %q: '?' and '[...]' are wildcards only in a host that also has '*' (OpenShell compares this host literally, so it would match no name); write e.g. *.example.com or api?.*.example.com", s)
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "", false, fmt.Sprintf("host %q has an empty label", s)
		case !validLabel(strings.Map(dropGlobMeta, l)):
			return "", false, fmt.Sprintf("host %q: label %q may hold only letters, digits, '-' and '_' (and the wildcards '*', '?', '[...]' in a pattern)", s, l)
		}
	}
	if last := labels[len(labels)-1]; !strings.ContainsAny(last, "*?[") && strings.Trim(last, "0123456789") == "" {
		return "", false, fmt.Sprintf("host %q is neither a domain name (its last label is numeric) nor an IP address", s)
	}
	if wild {
		if _, msg := checkHostPattern(s, h); msg != "" {
			return "", false, msg
		}
	}
	return h, wild, ""
}

// dropGlobMeta removes the pattern characters from a label before the
// character check (strings.Map callback).
func dropGlobMeta(r rune) rune {
	switch r {
	case '*', '?', '[', ']', '!':
		return -1
	}
	return r
}

func validLabel(l string) bool {
	if len(l) > 63 {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
