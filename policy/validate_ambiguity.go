package policy

// The ambiguity check without comparing every pair of endpoints.
//
// OpenShell (ambiguity.rs) compares endpoints pairwise: exact hosts with
// the endpoints of the same host, host patterns and host-less endpoints
// with every endpoint. Comparing two patterns is a search over pairs of
// glob positions, so a policy of 1,000 patterns (half a million pairs)
// took seconds to load. The pairs it compares, and how many there are (the
// limit on them), are unchanged here, but a pair is looked at only when it
// can yield an error:
//
//   - the endpoints differ in the metadata the conflict checks compare
//     (ambMeta; equal metadata never conflicts) and share a port;
//   - for host patterns, the hosts can meet: they agree on their literal
//     beginning and end, their number of dots and, label by label, on
//     literal text (hostShape.mayMeet). Patterns are found through sorted
//     lists of literal prefixes and reversed literal suffixes, so the
//     candidates of a pattern are a range, not every endpoint.
//
// The candidates left get the original pairwise check, in the original
// order, so the errors are those of the pairwise algorithm (the reference
// in validate_ambiguity_test.go, compared on random policies).

import (
	"cmp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ambEndpoint is an endpoint as the ambiguity check compares it.
type ambEndpoint struct {
	at    int // position in the endpoint list; pairs are reported in its order
	ep    *rawEndpoint
	host  string  // the host as written, lower case ("" when host-less)
	ports []int64 // port and ports as written, for the message
	// portSet is the positive ports, sorted, without duplicates.
	portSet []int64
	// meta is 1 + the number of its ambMeta among the distinct ones (0
	// until needed): equal numbers, no conflict.
	meta  int
	shape *hostShape // nil for a host-less endpoint; exact hosts' when there are patterns
}

// ambMeta is every value connectionConflicts and requestConflicts compare.
// Two endpoints with equal ambMeta never conflict: each check compares a
// value of one with the same value of the other. The request fields are
// zero when the endpoint carries no request metadata (then they are not
// compared).
type ambMeta struct {
	tcp      bool
	tls, ips string
	request  bool

	protocol, enforcement                string
	encodedSlash, wsRewrite, bodyRewrite bool
	wsGraphQL, strictTools               bool
	signing, service, region, provider   string
	graphQLBodyLimit, jsonRPCBodyLimit   int64
}

func ambMetaOf(ep *rawEndpoint) ambMeta {
	m := ambMeta{
		tcp:     strings.EqualFold(ep.str("protocol"), "tcp"),
		tls:     normalizedTLS(ep.str("tls")),
		ips:     normalizedIPs(ep),
		request: ep.requestMetadata(),
	}
	if !m.request {
		return m
	}
	strict, set := ep.mcpOption("strict_tool_names")
	m.protocol = requestProtocol(ep.str("protocol"))
	m.enforcement = enforcementMode(ep.str("enforcement"))
	m.encodedSlash = ep.flag("allow_encoded_slash")
	m.wsRewrite = ep.flag("websocket_credential_rewrite")
	m.bodyRewrite = ep.flag("request_body_credential_rewrite")
	m.wsGraphQL = websocketGraphQL(ep)
	m.strictTools = strict || !set
	m.signing, m.service, m.region = ep.str("credential_signing"), ep.str("signing_service"), ep.str("signing_region")
	m.provider = ep.provider()
	m.graphQLBodyLimit = bodyLimit(ep.uint(ep.vals["graphql_max_body_bytes"]))
	m.jsonRPCBodyLimit = bodyLimit(ep.jsonRPCBodyLimit())
	return m
}

// hostShape is what a host (exact or pattern) must agree on with another
// for the two to match a common name, in the glob language of
// hostPatternsOverlap: '*' is any run of runes but '.', "**" (two or more
// stars) any run of runes, every other rune itself.
type hostShape struct {
	norm     string // the host without one trailing dot; invalid UTF-8 as U+FFFD
	exact    bool   // no '*'
	prefix   string // the runes before the first '*' (norm when exact)
	suffix   string // the runes after the last '*' (norm when exact)
	rsuffix  string // suffix reversed byte by byte
	dots     int    // '.' in norm; a name it matches has exactly as many unless crosses
	crosses  bool   // has "**": a name it matches may have more dots
	labelsOf []labelShape
}

// labelShape is one '.'-separated label of a host without "**".
type labelShape struct {
	text, prefix, suffix string // prefix and suffix as in hostShape
	literal              bool
}

func newHostShape(host string) *hostShape {
	// hostPatternsOverlap compares runes: string([]rune) makes byte
	// comparisons below rune comparisons.
	s := &hostShape{norm: string([]rune(strings.TrimSuffix(host, ".")))}
	s.exact = !strings.Contains(s.norm, "*")
	s.prefix, s.suffix = literalEnds(s.norm)
	s.rsuffix = reverseBytes(s.suffix)
	s.dots = strings.Count(s.norm, ".")
	s.crosses = strings.Contains(s.norm, "**")
	if !s.crosses {
		for _, l := range strings.Split(s.norm, ".") {
			pre, suf := literalEnds(l)
			s.labelsOf = append(s.labelsOf, labelShape{text: l, prefix: pre, suffix: suf, literal: !strings.Contains(l, "*")})
		}
	}
	return s
}

// literalEnds returns the text before the first '*' and after the last
// (s and s when there is none).
func literalEnds(s string) (string, string) {
	first, last := strings.IndexByte(s, '*'), strings.LastIndexByte(s, '*')
	if first < 0 {
		return s, s
	}
	return s[:first], s[last+1:]
}

func reverseBytes(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// prefixesMeet: two names can start with a and with b.
func prefixesMeet(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }

// suffixesMeet: two names can end with a and with b.
func suffixesMeet(a, b string) bool { return strings.HasSuffix(a, b) || strings.HasSuffix(b, a) }

// fits: the literal text s can match a glob whose literal ends are prefix
// and suffix (the ends cannot share a rune of s).
func fits(s, prefix, suffix string) bool {
	return len(s) >= len(prefix)+len(suffix) && strings.HasPrefix(s, prefix) && strings.HasSuffix(s, suffix)
}

// mayMeet is false only when no name matches both hosts: it is implied by
// hostPatternsOverlap (TestHostShapeMayMeet) and cheap to compute.
func (a *hostShape) mayMeet(b *hostShape) bool {
	switch {
	case a.exact && b.exact:
		return a.norm == b.norm
	case a.exact && !fits(a.norm, b.prefix, b.suffix), b.exact && !fits(b.norm, a.prefix, a.suffix):
		return false
	case !prefixesMeet(a.prefix, b.prefix) || !suffixesMeet(a.suffix, b.suffix):
		return false
	// A common name has a.dots dots if !a.crosses, at least a.dots if it does.
	case !a.crosses && !b.crosses && a.dots != b.dots,
		!a.crosses && b.crosses && a.dots < b.dots,
		a.crosses && !b.crosses && b.dots < a.dots:
		return false
	case a.crosses || b.crosses:
		return true
	}
	// No "**": the i-th labels of a common name match the i-th labels.
	for i, la := range a.labelsOf {
		lb := b.labelsOf[i]
		switch {
		case la.literal && lb.literal:
			if la.text != lb.text {
				return false
			}
		case la.literal && !fits(la.text, lb.prefix, lb.suffix),
			lb.literal && !fits(lb.text, la.prefix, la.suffix),
			!prefixesMeet(la.prefix, lb.prefix) || !suffixesMeet(la.suffix, lb.suffix):
			return false
		}
	}
	return true
}

// sharePort: two sorted port sets intersect.
func sharePort(a, b []int64) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			return true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return false
}

// ambiguity is the state of one ambiguity check.
type ambiguity struct {
	metas map[ambMeta]int // distinct metadata -> its number
}

// metaOf numbers e's metadata on first use (most endpoints of a large
// policy are never a candidate).
func (a *ambiguity) metaOf(e *ambEndpoint) int {
	if e.meta == 0 {
		m := ambMetaOf(e.ep)
		if a.metas[m] == 0 {
			a.metas[m] = len(a.metas) + 1
		}
		e.meta = a.metas[m]
	}
	return e.meta
}

// mayConflict: the pair can be reported whatever its hosts.
func (a *ambiguity) mayConflict(l, r *ambEndpoint) bool {
	return sharePort(l.portSet, r.portSet) && a.metaOf(l) != a.metaOf(r)
}

// shapeList is endpoints sorted by a key of their host shape, so those
// whose key starts with a given text are a range.
type shapeList struct {
	keys []string
	eps  []*ambEndpoint
}

func newShapeList(eps []*ambEndpoint, key func(*hostShape) string) shapeList {
	type entry struct {
		key string
		e   *ambEndpoint
	}
	entries := make([]entry, len(eps))
	for i, e := range eps {
		entries[i] = entry{key(e.shape), e}
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Or(strings.Compare(a.key, b.key), a.e.at-b.e.at) })
	l := shapeList{keys: make([]string, len(entries)), eps: make([]*ambEndpoint, len(entries))}
	for i, en := range entries {
		l.keys[i], l.eps[i] = en.key, en.e
	}
	return l
}

// extending returns the range of entries whose key starts with k.
func (l shapeList) extending(k string) (int, int) {
	lo, _ := slices.BinarySearch(l.keys, k)
	hi := lo + sort.Search(len(l.keys)-lo, func(i int) bool { return !strings.HasPrefix(l.keys[lo+i], k) })
	return lo, hi
}

// checkAmbiguity: ambiguity.rs find_endpoint_ambiguities. Two endpoints
// (in any network policies) whose hosts can match the same name and whose
// ports intersect must agree on connection metadata (explicit tcp, tls,
// allowed_ips) and, when both carry request metadata and their paths
// overlap at the same specificity, on request metadata. Otherwise which
// endpoint's metadata applies, and whose allowed_ips a decision reports,
// would depend on iteration order.
func (p *parser) checkAmbiguity(eps []*rawEndpoint) {
	p.checkAmbiguityLimit(eps, maxAmbiguityPairs)
}

// checkAmbiguityLimit is checkAmbiguity refusing more than limit pairs.
func (p *parser) checkAmbiguityLimit(eps []*rawEndpoint, limit int64) {
	// An endpoint reached twice through a YAML alias is one endpoint.
	var exact, globs, hostless, primary []*ambEndpoint
	buckets := make(map[string][]*ambEndpoint, len(eps))
	seenNode := make(map[*yaml.Node]bool, len(eps))
	for i, ep := range eps {
		if seenNode[ep.node] {
			continue
		}
		seenNode[ep.node] = true
		e := &ambEndpoint{at: i, ep: ep, host: strings.ToLower(ep.str("host"))}
		if v := ep.vals["port"]; v != nil {
			e.ports = append(e.ports, ep.uint(v))
		}
		for _, item := range ep.list("ports") {
			e.ports = append(e.ports, ep.uint(item))
		}
		for _, port := range e.ports {
			if port > 0 {
				e.portSet = append(e.portSet, port)
			}
		}
		slices.Sort(e.portSet)
		e.portSet = slices.Compact(e.portSet)
		switch {
		case e.host == "":
			hostless = append(hostless, e)
		case strings.Contains(e.host, "*"):
			e.shape = newHostShape(e.host)
			globs = append(globs, e)
		default:
			exact = append(exact, e)
			key := strings.TrimSuffix(e.host, ".")
			buckets[key] = append(buckets[key], e)
		}
		primary = append(primary, e)
	}

	// The pairs OpenShell compares: exact hosts within a bucket of equal
	// hosts, patterns (host-less included) with every endpoint.
	total := int64(0)
	for _, b := range buckets {
		total += int64(len(b)) * int64(len(b)-1) / 2
	}
	np, ne := int64(len(globs)+len(hostless)), int64(len(exact))
	total += np*ne + np*(np-1)/2
	if total > limit {
		p.errorf(eps[0].node, "too many overlapping endpoints to check for conflicting settings (more than %d pairs); merge endpoints that share a host and port", limit)
		return
	}

	amb := &ambiguity{metas: map[ambMeta]int{}}
	var pairs [][2]int
	add := func(l, r *ambEndpoint) {
		pairs = append(pairs, [2]int{min(l.at, r.at), max(l.at, r.at)})
	}
	for _, b := range buckets {
		for x := range b {
			for _, r := range b[x+1:] {
				if amb.mayConflict(b[x], r) {
					add(b[x], r)
				}
			}
		}
	}
	// A host-less endpoint overlaps every host.
	for _, h := range hostless {
		for _, e := range primary {
			if e != h && (e.host != "" || e.at > h.at) && amb.mayConflict(h, e) {
				add(h, e)
			}
		}
	}
	if len(globs) > 0 {
		amb.globCandidates(globs, exact, add)
	}

	slices.SortFunc(pairs, func(a, b [2]int) int { return cmp.Or(a[0]-b[0], a[1]-b[1]) })
	pairs = slices.Compact(pairs)
	byAt := make([]*ambEndpoint, len(eps))
	for _, e := range primary {
		byAt[e.at] = e
	}
	for _, pair := range pairs {
		p.checkAmbiguousPair(byAt[pair[0]], byAt[pair[1]])
	}
}

// globCandidates passes to add the pairs of a host pattern with an exact
// host or another pattern that mayConflict and whose hosts mayMeet, each
// pair once.
func (a *ambiguity) globCandidates(globs, exact []*ambEndpoint, add func(l, r *ambEndpoint)) {
	candidate := func(l, r *ambEndpoint) {
		if l.shape.mayMeet(r.shape) && a.mayConflict(l, r) {
			add(l, r)
		}
	}
	for _, e := range exact {
		e.shape = newHostShape(e.host)
	}
	// An exact host matched by a pattern starts with its prefix and ends
	// with its suffix: each pattern walks the shorter of the two ranges.
	exactByPrefix := newShapeList(exact, func(s *hostShape) string { return s.norm })
	exactBySuffix := newShapeList(exact, func(s *hostShape) string { return s.rsuffix })
	for _, g := range globs {
		lo, hi := exactByPrefix.extending(g.shape.prefix)
		list := exactByPrefix
		if slo, shi := exactBySuffix.extending(g.shape.rsuffix); shi-slo < hi-lo {
			lo, hi, list = slo, shi, exactBySuffix
		}
		for _, e := range list.eps[lo:hi] {
			candidate(g, e)
		}
	}
	// Two patterns that meet have prefixes one of which starts the other,
	// and suffixes one of which ends the other: walk the pairs that agree
	// so on prefixes first or on suffixes first, whichever are fewer.
	prefix := func(s *hostShape) string { return s.prefix }
	suffix := func(s *hostShape) string { return s.rsuffix }
	if extensionPairs(globs, suffix, prefix, nil) < extensionPairs(globs, prefix, suffix, nil) {
		extensionPairs(globs, suffix, prefix, candidate)
	} else {
		extensionPairs(globs, prefix, suffix, candidate)
	}
}

// extensionPairs passes to visit, once each, the pairs of eps whose keys
// are equal or one starts the other and, for pairs of equal keys, whose
// inner keys are so too (all pairs of equal keys when inner is nil). It
// returns the number of pairs; visit nil only counts them.
func extensionPairs(eps []*ambEndpoint, key, inner func(*hostShape) string, visit func(a, b *ambEndpoint)) int {
	l := newShapeList(eps, key)
	n := 0
	for start := 0; start < len(l.eps); {
		end := start + 1 // the group of equal keys is l.eps[start:end]
		for end < len(l.eps) && l.keys[end] == l.keys[start] {
			end++
		}
		group := l.eps[start:end]
		_, hi := l.extending(l.keys[start])
		n += len(group) * (hi - end) // keys that extend the group's
		if visit != nil {
			for _, a := range group {
				for _, b := range l.eps[end:hi] {
					visit(a, b)
				}
			}
		}
		switch {
		case len(group) < 2:
		case inner != nil:
			n += extensionPairs(group, inner, nil, visit)
		default:
			n += len(group) * (len(group) - 1) / 2
			if visit != nil {
				for i, a := range group {
					for _, b := range group[i+1:] {
						visit(a, b)
					}
				}
			}
		}
		start = end
	}
	return n
}

// checkAmbiguousPair reports l and r (l first in the file's endpoint
// order) when they share a port, their hosts overlap and their settings
// conflict.
func (p *parser) checkAmbiguousPair(l, r *ambEndpoint) {
	var shared []string
	for _, port := range l.ports {
		if port > 0 && slices.Contains(r.ports, port) && !slices.Contains(shared, strconv.FormatInt(port, 10)) {
			shared = append(shared, strconv.FormatInt(port, 10))
		}
	}
	if len(shared) == 0 || !hostPatternsOverlap(l.host, r.host) {
		return
	}
	conflicts := connectionConflicts(l.ep, r.ep)
	lp, rp := l.ep.str("path"), r.ep.str("path")
	if l.ep.requestMetadata() && r.ep.requestMetadata() && pathPatternsOverlap(lp, rp) && pathSpecificity(lp) == pathSpecificity(rp) {
		conflicts = append(conflicts, requestConflicts(l.ep, r.ep)...)
	}
	if len(conflicts) == 0 {
		return
	}
	p.errorf(r.ep.node, "endpoint %s of network policy %q overlaps endpoint %s of network policy %q (line %d) on port(s) %s with conflicting settings: %s; make them agree, or split the hosts or ports",
		r.ep.selector(), r.ep.policy, l.ep.selector(), l.ep.policy, l.ep.node.Line, strings.Join(shared, ","), strings.Join(conflicts, "; "))
}
