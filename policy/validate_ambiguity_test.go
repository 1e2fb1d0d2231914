package policy

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// The ambiguity check (validate_ambiguity.go) looks only at the pairs of
// endpoints that can yield an error; these tests hold it to the pairwise
// algorithm it replaced (refCheckAmbiguity, below): the same errors, in
// the same order, on random policies. The seed is random per run and
// printed; POLICY_AMBIGUITY_SEED=<n> replays a run.

// ambiguitySeed returns the generator seed: POLICY_AMBIGUITY_SEED, or the
// clock.
func ambiguitySeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("POLICY_AMBIGUITY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("POLICY_AMBIGUITY_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// pick returns one of choices.
func pick[T any](r *rand.Rand, choices ...T) T { return choices[r.IntN(len(choices))] }

// randomHost is a host from a small alphabet, so hosts often overlap:
// literal labels, partial and whole '*' labels, "**" anywhere, a trailing
// dot, upper case, '?' (literal to the ambiguity check), IP literals, or
// none (a host-less endpoint).
func randomHost(r *rand.Rand) (string, bool) {
	switch r.IntN(20) {
	case 0:
		return "", false // no host key
	case 1:
		return pick(r, `""`, "10.0.0.1", `"::1"`, "a.b.", "A.B", `"a?.b"`, `"*"`, `"**"`, `"."`), true
	}
	n := 1 + r.IntN(4)
	labels := make([]string, n)
	for i := range labels {
		if r.IntN(3) == 0 {
			labels[i] = pick(r, "*", "a*", "*a", "*b*", "a*b", "**", "ab*", "*-x", "***")
		} else {
			labels[i] = pick(r, "a", "b", "ab", "ba", "api", "x", "a-x", "example", "com")
		}
	}
	h := strings.Join(labels, ".")
	if r.IntN(10) == 0 {
		h += "."
	}
	if r.IntN(10) == 0 {
		h = strings.ToUpper(h)
	}
	return strconv.Quote(h), true
}

// randomEndpoint is a flow mapping of an endpoint with random ports and,
// now and then, each setting the conflict checks compare.
func randomEndpoint(r *rand.Rand) string {
	var f []string
	if h, ok := randomHost(r); ok {
		f = append(f, "host: "+h)
	}
	port := func() string { return pick(r, "80", "443", "443", "8443", "0", "x") }
	switch r.IntN(6) {
	case 0:
		ps := make([]string, 1+r.IntN(3))
		for i := range ps {
			ps[i] = port()
		}
		f = append(f, "ports: ["+strings.Join(ps, ", ")+"]")
	case 1:
		f = append(f, "port: "+port(), "ports: [80, 443]")
	case 2:
	default:
		f = append(f, "port: "+pick(r, "80", "443", "443", "8443"))
	}
	opt := func(n int, field string, values ...string) {
		if r.IntN(n) == 0 {
			f = append(f, field+": "+pick(r, values...))
		}
	}
	opt(4, "tls", "skip", "SKIP", "terminate")
	opt(4, "protocol", "tcp", "TCP", "rest", "websocket", "graphql", "json-rpc", "mcp")
	opt(5, "allowed_ips", "[10.0.0.0/8]", "[10.0.0.0/8, 192.168.0.0/16]", "[192.168.0.0/16, 10.0.0.0/8]", "[\" 10.0.0.0/8\"]")
	opt(5, "path", "/a", "/a/*", "/b", `"**"`, `"/v[12]"`, `"/v?"`)
	opt(8, "enforcement", "enforce", "audit")
	opt(8, "access", "full")
	opt(10, "allow_encoded_slash", "true", "false")
	opt(12, "websocket_credential_rewrite", "true")
	opt(12, "request_body_credential_rewrite", "true")
	opt(10, "credential_signing", "sigv4", "sigv4:no_body")
	opt(10, "signing_service", "s3", "bedrock")
	opt(12, "signing_region", "us-east-1")
	opt(8, "credential_binding", "{provider: a}", "{provider: b}", "null")
	opt(10, "graphql_max_body_bytes", "0", "1024", "65536")
	opt(10, "mcp", "{max_body_bytes: 2048}", "{strict_tool_names: true}", "{strict_tool_names: false, allow_all_known_mcp_methods: true}")
	opt(12, "json_rpc", "{max_body_bytes: 4096}")
	opt(8, "rules", "[{allow: {operation_type: query}}]", "[{allow: {method: GET}}]")
	opt(12, "persisted_queries", "allow_registered", "deny")
	return "{" + strings.Join(f, ", ") + "}"
}

// randomAmbiguityPolicy is a policy of n random endpoints in up to three
// network policies; some endpoints are YAML aliases of earlier ones.
func randomAmbiguityPolicy(r *rand.Rand, n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	anchors := 0
	for i := 0; i < n; i++ {
		if i == 0 || r.IntN(max(n/3, 1)) == 0 {
			fmt.Fprintf(&b, "  p%d:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n", i)
		}
		switch {
		case anchors > 0 && r.IntN(10) == 0:
			fmt.Fprintf(&b, "      - *e%d\n", r.IntN(anchors))
		case r.IntN(5) == 0:
			fmt.Fprintf(&b, "      - &e%d %s\n", anchors, randomEndpoint(r))
			anchors++
		default:
			fmt.Fprintf(&b, "      - %s\n", randomEndpoint(r))
		}
	}
	return []byte(b.String())
}

// TestAmbiguityMatchesPairwise: on random policies (and on the compat
// policies), checkAmbiguityLimit reports the errors refCheckAmbiguity does,
// in the same order, with the real limit and with small ones.
func TestAmbiguityMatchesPairwise(t *testing.T) {
	seed := ambiguitySeed(t)
	t.Logf("seed %d (replay with POLICY_AMBIGUITY_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 0xa4b))
	policies := 1500
	if testing.Short() || raceEnabled {
		policies = 300
	}
	var errs, overLimit, withErrs int
	for i := 0; i < policies; i++ {
		n := 1 + r.IntN(25)
		if i%25 == 0 {
			n = 40 + r.IntN(60)
		}
		src := randomAmbiguityPolicy(r, n)
		limit := int64(maxAmbiguityPairs)
		if r.IntN(4) == 0 {
			limit = int64(r.IntN(3 * n))
		}
		got, want := ambiguityErrors(src, limit, false), ambiguityErrors(src, limit, true)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d (POLICY_AMBIGUITY_SEED=%d), policy %d, limit %d: errors differ\ngot:\n  %s\nwant (pairwise):\n  %s\npolicy:\n%s",
				seed, seed, i, limit, strings.Join(got, "\n  "), strings.Join(want, "\n  "), src)
		}
		errs += len(want)
		if len(want) > 0 {
			withErrs++
			if strings.Contains(want[0], "too many overlapping endpoints") {
				overLimit++
			}
		}
	}
	t.Logf("seed %d: %d policies agree; %d with errors (%d over the limit), %d errors in all", seed, policies, withErrs, overLimit, errs)
	// The test means something only if both kinds of error occur often.
	if withErrs-overLimit < policies/10 || overLimit < policies/50 {
		t.Errorf("seed %d: too few policies with errors: %d conflicts, %d over the limit, of %d", seed, withErrs-overLimit, overLimit, policies)
	}
}

// TestAmbiguityMatchesPairwiseOnCompat: the same on the compat and
// ambiguity table policies.
func TestAmbiguityMatchesPairwiseOnCompat(t *testing.T) {
	var srcs [][]byte
	for _, row := range compatTable() {
		if row.file != "" {
			srcs = append(srcs, compatFile(t, row.file))
		} else {
			srcs = append(srcs, []byte(row.yaml))
		}
	}
	srcs = append(srcs, manyPatternsPolicy(100), manyExactHostsPolicy(300), middlePatternsPolicy(100))
	src, _ := patternPolicyN(100)
	srcs = append(srcs, src)
	for i, src := range srcs {
		got, want := ambiguityErrors(src, maxAmbiguityPairs, false), ambiguityErrors(src, maxAmbiguityPairs, true)
		if !slices.Equal(got, want) {
			t.Errorf("policy %d: errors differ\ngot:\n  %s\nwant (pairwise):\n  %s", i, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// ambiguityErrors parses src and runs one ambiguity check on its
// endpoints (whatever else is wrong with the policy), returning the errors.
func ambiguityErrors(src []byte, limit int64, pairwise bool) []string {
	p := &parser{file: "r.yaml"}
	p.parse(src)
	q := &parser{file: "r.yaml"}
	if pairwise {
		refCheckAmbiguity(q, p.endpoints, limit)
	} else {
		q.checkAmbiguityLimit(p.endpoints, limit)
	}
	out := make([]string, len(q.errs))
	for i, e := range q.errs {
		out[i] = e.Error()
	}
	return out
}

// TestHostShapeMayMeet: mayMeet is true whenever hostPatternsOverlap is,
// on every pair of hosts of up to four runes over "a", "b", ".", "*"
// (and a few longer ones), and it rules out most pairs that do not overlap.
func TestHostShapeMayMeet(t *testing.T) {
	hosts := []string{"api.example.com", "*.example.com", "**.example.com", "*-svc1.example.com", "*-svc11.example.com",
		"api1-*.x.test", "api11-*.x.test", "*.s3.*.amazonaws.com", "a.s3.b.amazonaws.com", "a.*", "é*.b", "éa.b"}
	var grow func(prefix string)
	grow = func(prefix string) {
		if prefix != "" {
			hosts = append(hosts, prefix)
		}
		if len(prefix) < 4 {
			for _, c := range []string{"a", "b", ".", "*"} {
				grow(prefix + c)
			}
		}
	}
	grow("")
	shapes := make([]*hostShape, len(hosts))
	for i, h := range hosts {
		shapes[i] = newHostShape(h)
	}
	overlap, ruledOut, disjoint := 0, 0, 0
	for i, l := range hosts {
		for j, r := range hosts {
			meets := shapes[i].mayMeet(shapes[j])
			switch {
			case hostPatternsOverlap(l, r):
				overlap++
				if !meets {
					t.Fatalf("%q and %q overlap, but mayMeet is false", l, r)
				}
			case meets:
				disjoint++
			default:
				disjoint++
				ruledOut++
			}
		}
	}
	t.Logf("%d hosts: %d ordered pairs overlap; mayMeet rules out %d of the %d that do not", len(hosts), overlap, ruledOut, disjoint)
	if ruledOut < disjoint*9/10 {
		t.Errorf("mayMeet rules out only %d of %d disjoint pairs", ruledOut, disjoint)
	}
}

// TestAmbiguityMeta: random endpoints with equal ambMeta never conflict
// (so the ambiguity check may skip them).
func TestAmbiguityMeta(t *testing.T) {
	seed := ambiguitySeed(t)
	r := rand.New(rand.NewPCG(seed, 0x3e7a))
	eps := make([]*rawEndpoint, 250)
	metas, srcs := make([]ambMeta, len(eps)), make([]string, len(eps))
	for i := range eps {
		var n yaml.Node
		srcs[i] = randomEndpoint(r)
		if err := yaml.Unmarshal([]byte(srcs[i]), &n); err != nil {
			t.Fatal(err)
		}
		p := &parser{}
		eps[i] = p.rawEndpoint("p", i, n.Content[0])
		metas[i] = ambMetaOf(eps[i])
	}
	equal, conflicting := 0, 0
	for i, l := range eps {
		for j, r := range eps[:i] {
			c := connectionConflicts(l, r)
			if l.requestMetadata() && r.requestMetadata() {
				c = append(c, requestConflicts(l, r)...)
			}
			if len(c) > 0 {
				conflicting++
			}
			if metas[i] == metas[j] {
				equal++
				if len(c) > 0 {
					t.Fatalf("seed %d: equal ambMeta, conflicts %v:\n%s\n%s", seed, c, srcs[i], srcs[j])
				}
			}
		}
	}
	t.Logf("seed %d: %d pairs with equal ambMeta, %d conflicting", seed, equal, conflicting)
	if equal < len(eps) || conflicting == 0 {
		t.Errorf("seed %d: degenerate sample: %d equal, %d conflicting", seed, equal, conflicting)
	}
}

// refCheckAmbiguity is the pairwise ambiguity check that checkAmbiguity
// replaced (validate.go before validate_ambiguity.go), verbatim but for
// refusing more than limit pairs instead of maxAmbiguityPairs: it builds
// every pair OpenShell compares and checks each one.
func refCheckAmbiguity(p *parser, eps []*rawEndpoint, limit int64) {
	type prepared struct {
		ep    *rawEndpoint
		host  string
		ports []int64
	}
	all := make([]prepared, 0, len(eps))
	for _, ep := range eps {
		pr := prepared{ep: ep, host: strings.ToLower(ep.str("host"))}
		if v := ep.vals["port"]; v != nil {
			pr.ports = append(pr.ports, ep.uint(v))
		}
		for _, item := range ep.list("ports") {
			pr.ports = append(pr.ports, ep.uint(item))
		}
		all = append(all, pr)
	}
	// Candidate pairs share a port and, unless one host is a pattern or
	// absent, the host: exact hosts are bucketed, patterns meet everyone.
	// An endpoint reached twice through a YAML alias is one endpoint.
	buckets := map[string][]int{}
	var patterns []int
	seenNode := map[*yaml.Node]bool{}
	primary := make([]bool, len(all))
	for i, pr := range all {
		if seenNode[pr.ep.node] {
			continue
		}
		seenNode[pr.ep.node], primary[i] = true, true
		if refIsPattern(pr.host) {
			patterns = append(patterns, i)
		} else {
			buckets[strings.TrimSuffix(pr.host, ".")] = append(buckets[strings.TrimSuffix(pr.host, ".")], i)
		}
	}
	var pairs [][2]int
	for _, b := range buckets {
		for x := range b {
			for y := x + 1; y < len(b); y++ {
				pairs = append(pairs, [2]int{b[x], b[y]})
			}
		}
		if int64(len(pairs)) > limit {
			break
		}
	}
	for _, w := range patterns {
		for i := range all {
			if i != w && primary[i] && (!refIsPattern(all[i].host) || i > w) {
				pairs = append(pairs, [2]int{min(i, w), max(i, w)})
			}
		}
		if int64(len(pairs)) > limit {
			break
		}
	}
	if int64(len(pairs)) > limit {
		p.errorf(all[0].ep.node, "too many overlapping endpoints to check for conflicting settings (more than %d pairs); merge endpoints that share a host and port", limit)
		return
	}
	slices.SortFunc(pairs, func(a, b [2]int) int { return cmp.Or(a[0]-b[0], a[1]-b[1]) })
	for _, pair := range pairs {
		l, r := all[pair[0]], all[pair[1]]
		var shared []string
		for _, port := range l.ports {
			if port > 0 && slices.Contains(r.ports, port) && !slices.Contains(shared, strconv.FormatInt(port, 10)) {
				shared = append(shared, strconv.FormatInt(port, 10))
			}
		}
		if len(shared) == 0 || !hostPatternsOverlap(l.host, r.host) {
			continue
		}
		conflicts := connectionConflicts(l.ep, r.ep)
		lp, rp := l.ep.str("path"), r.ep.str("path")
		if l.ep.requestMetadata() && r.ep.requestMetadata() && pathPatternsOverlap(lp, rp) && pathSpecificity(lp) == pathSpecificity(rp) {
			conflicts = append(conflicts, requestConflicts(l.ep, r.ep)...)
		}
		if len(conflicts) == 0 {
			continue
		}
		p.errorf(r.ep.node, "endpoint %s of network policy %q overlaps endpoint %s of network policy %q (line %d) on port(s) %s with conflicting settings: %s; make them agree, or split the hosts or ports",
			r.ep.selector(), r.ep.policy, l.ep.selector(), l.ep.policy, l.ep.node.Line, strings.Join(shared, ","), strings.Join(conflicts, "; "))
	}
}

func refIsPattern(host string) bool { return host == "" || strings.Contains(host, "*") }

// TestEndpointUint: the decimal fast path of rawEndpoint.uint gives what
// yaml.v3's Decode gives, on integers YAML writes in many ways.
func TestEndpointUint(t *testing.T) {
	values := []string{"0", "1", "443", "65535", "0443", "00", "0x1BB", "0o17", "0b101", "1_000", "+443", "-443", "443.0", "1e3",
		`"443"`, `'443'`, "!!int 443", `!!int "443"`, "!!str 443", "!!float 443", "~", "null", "true", "x", "",
		"999999999999999999", "9223372036854775807", "9223372036854775808", "99999999999999999999", "2001", "2001-01-01"}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		values = append(values, strconv.FormatInt(r.Int64N(1<<uint(1+r.IntN(62))), 10))
	}
	for _, s := range values {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte("port: "+s), &doc); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		v := doc.Content[0].Content[1]
		var want int64
		if v.ShortTag() != "!!int" || v.Decode(&want) != nil {
			want = 0
		}
		if got := (&rawEndpoint{}).uint(v); got != want {
			t.Errorf("uint(%s) = %d, want %d (Decode)", s, got, want)
		}
	}
}

// TestExtensionPairs: over random host patterns, extensionPairs visits
// every pair of patterns that mayMeet, each once, whichever key goes
// first, and returns the number of pairs it visits.
func TestExtensionPairs(t *testing.T) {
	seed := ambiguitySeed(t)
	r := rand.New(rand.NewPCG(seed, 0xe47))
	prefix := func(s *hostShape) string { return s.prefix }
	suffix := func(s *hostShape) string { return s.rsuffix }
	for round := 0; round < 200; round++ {
		globs := make([]*ambEndpoint, 1+r.IntN(60))
		for i := range globs {
			h, _ := randomHost(r)
			if h, _ = strconv.Unquote(h); !strings.Contains(h, "*") {
				h = "*" + h
			}
			globs[i] = &ambEndpoint{at: i, host: strings.ToLower(h), shape: newHostShape(strings.ToLower(h))}
		}
		for _, order := range [][2]func(*hostShape) string{{prefix, suffix}, {suffix, prefix}} {
			seen := map[[2]int]int{}
			n := extensionPairs(globs, order[0], order[1], func(a, b *ambEndpoint) {
				seen[[2]int{min(a.at, b.at), max(a.at, b.at)}]++
			})
			visits := 0
			for pair, c := range seen {
				visits += c
				if c > 1 || pair[0] == pair[1] {
					t.Fatalf("seed %d: pair %v visited %d times", seed, pair, c)
				}
			}
			if n != visits || n != extensionPairs(globs, order[0], order[1], nil) {
				t.Fatalf("seed %d: %d pairs counted, %d visited", seed, n, visits)
			}
			for i, a := range globs {
				for _, b := range globs[i+1:] {
					if a.shape.mayMeet(b.shape) && seen[[2]int{a.at, b.at}] == 0 {
						t.Fatalf("seed %d: %q and %q may meet but were not visited", seed, a.host, b.host)
					}
				}
			}
		}
	}
}
