package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// hostPattern is a compiled endpoint host pattern with OpenShell's
// semantics (crates/openshell-core/src/host_pattern.rs, and the Rego
// glob.match(host, ["."], name) it mirrors):
//
//   - matching is case-insensitive (both sides are lower case here);
//   - a host is split into DNS labels at '.'; a host with an empty label
//     never matches;
//   - a label that is exactly "**" consumes one or more whole labels;
//   - any other label is a glob matched against exactly one host label:
//     '*' is any run of characters (empty too) within the label, '?' is one
//     character, "[...]" a character class ("[!...]" negated, "a-z" ranges).
//
// Which shapes a policy may use is decided by checkHostPattern; the matcher
// itself accepts "**" anywhere, like OpenShell's.
type hostPattern struct {
	source string
	labels []labelPattern
}

type labelPattern struct {
	recursive bool   // the whole label is "**"
	literal   bool   // no wildcard: compared as is
	text      string // the label (or its glob)
}

// compileHostPattern compiles a lower-case pattern. It fails on what
// OpenShell's HostPattern::new refuses: empty pattern or label, whitespace,
// braces, "**" inside a label, an unclosed '['.
func compileHostPattern(s string) (*hostPattern, error) {
	switch {
	case s == "":
		return nil, fmt.Errorf("host pattern is empty")
	case strings.ContainsAny(s, " \t\r\n\v\f"):
		return nil, fmt.Errorf("host pattern %q contains whitespace", s)
	case strings.ContainsAny(s, "{}"):
		return nil, fmt.Errorf("host pattern %q has brace alternates; list each host pattern separately", s)
	}
	p := &hostPattern{source: s}
	for _, l := range strings.Split(s, ".") {
		switch {
		case l == "":
			return nil, fmt.Errorf("host pattern %q has an empty label", s)
		case l == "**":
			p.labels = append(p.labels, labelPattern{recursive: true, text: l})
			continue
		case strings.Contains(l, "**"):
			return nil, fmt.Errorf("host pattern %q: '**' must be a whole label", s)
		}
		if err := checkLabelGlob(l); err != nil {
			return nil, fmt.Errorf("host pattern %q: %w", s, err)
		}
		p.labels = append(p.labels, labelPattern{literal: !strings.ContainsAny(l, "*?["), text: l})
	}
	return p, nil
}

// checkLabelGlob reports an unclosed or empty character class.
func checkLabelGlob(l string) error {
	for i := 0; i < len(l); i++ {
		if l[i] != '[' {
			continue
		}
		end := classEnd(l, i)
		if end < 0 {
			return fmt.Errorf("label %q has an unclosed '['", l)
		}
		i = end
	}
	return nil
}

// classEnd returns the index of the ']' closing the class opened at i, or
// -1. A ']' right after "[" or "[!" is a member, as in the glob crate.
func classEnd(l string, i int) int {
	j := i + 1
	if j < len(l) && l[j] == '!' {
		j++
	}
	if j < len(l) && l[j] == ']' {
		j++
	}
	for ; j < len(l); j++ {
		if l[j] == ']' {
			return j
		}
	}
	return -1
}

// match reports whether a lower-case host matches.
func (p *hostPattern) match(host string) bool {
	if host == "" {
		return false
	}
	// NFA over pattern positions: cur[i] means labels[:i] consumed the host
	// labels read so far.
	n := len(p.labels)
	cur, next := make([]bool, n+1), make([]bool, n+1)
	cur[0] = true
	for rest := host; ; {
		label := rest
		dot := strings.IndexByte(rest, '.')
		if dot >= 0 {
			label, rest = rest[:dot], rest[dot+1:]
		}
		if label == "" {
			return false
		}
		clear(next)
		any := false
		for i := 0; i < n; i++ {
			if !cur[i] {
				continue
			}
			lp := &p.labels[i]
			switch {
			case lp.recursive:
				next[i], next[i+1], any = true, true, true
			case lp.literal && lp.text == label, !lp.literal && globLabel(lp.text, label):
				next[i+1], any = true, true
			}
		}
		if !any {
			return false
		}
		cur, next = next, cur
		if dot < 0 {
			return cur[n]
		}
	}
}

// literalSuffix is the pattern's trailing run of literal labels ("" when
// the last label is a wildcard): every host it matches ends in "." + it.
func (p *hostPattern) literalSuffix() string {
	i := len(p.labels)
	for i > 0 && p.labels[i-1].literal {
		i--
	}
	parts := make([]string, 0, len(p.labels)-i)
	for _, l := range p.labels[i:] {
		parts = append(parts, l.text)
	}
	return strings.Join(parts, ".")
}

// wildcardTail is the literal characters ending the last wildcard label
// (the one before literalSuffix): every host the pattern matches has a
// label there ending in them. It is "" when that label is "**" or ends in
// a wildcard, or when there is no wildcard label.
func (p *hostPattern) wildcardTail() string {
	i := len(p.labels)
	for i > 0 && p.labels[i-1].literal {
		i--
	}
	if i == 0 || p.labels[i-1].recursive {
		return ""
	}
	l := p.labels[i-1].text
	return l[strings.LastIndexAny(l, "*?[]")+1:]
}

// globLabel matches one label against a glob of '*', '?' and classes.
func globLabel(pat, s string) bool {
	// Iterative matching with one backtrack point for the last '*'.
	px, sx := 0, 0
	starP, starS := -1, 0
	for sx < len(s) {
		if px < len(pat) {
			switch c := pat[px]; c {
			case '*':
				starP, starS = px, sx
				px++
				continue
			case '?':
				_, size := decodeRune(s[sx:])
				px, sx = px+1, sx+size
				continue
			case '[':
				if end := classEnd(pat, px); end > 0 {
					r, size := decodeRune(s[sx:])
					if classMatch(pat[px+1:end], r) {
						px, sx = end+1, sx+size
						continue
					}
					break
				}
				fallthrough
			default:
				if c == s[sx] {
					px, sx = px+1, sx+1
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		_, size := decodeRune(s[starS:])
		starS += size
		px, sx = starP+1, starS
	}
	for px < len(pat) && pat[px] == '*' {
		px++
	}
	return px == len(pat)
}

// classMatch matches r against a class body (between '[' and ']').
func classMatch(body string, r rune) bool {
	neg := strings.HasPrefix(body, "!")
	if neg {
		body = body[1:]
	}
	rs := []rune(body)
	in := false
	for i := 0; i < len(rs); i++ {
		if i+2 < len(rs) && rs[i+1] == '-' {
			if rs[i] <= r && r <= rs[i+2] {
				in = true
			}
			i += 2
			continue
		}
		if rs[i] == r {
			in = true
		}
	}
	return in != neg
}

func decodeRune(s string) (rune, int) { return utf8.DecodeRuneInString(s) }

// checkHostPattern applies OpenShell's policy checks on a host with '*'
// (validate_sandbox_policy: TldWildcard and host_wildcard_shape_invalid),
// then compiles it. h is lower case. It returns what is wrong, or "".
func checkHostPattern(orig, h string) (*hostPattern, string) {
	labels := strings.Split(h, ".")
	if strings.Contains(labels[0], "**") && labels[0] != "**" {
		return nil, fmt.Sprintf("host %q: '**' must be the whole first label (**.example.com matches any depth); within a label use a single '*', e.g. *-api.example.com", orig)
	}
	for _, l := range labels[1:] {
		if strings.Contains(l, "**") {
			return nil, fmt.Sprintf("host %q: '**' is allowed only as the whole first label, e.g. **.example.com", orig)
		}
		if strings.Contains(l, "*") && l != "*" {
			return nil, fmt.Sprintf("host %q: after the first label a wildcard must be a whole label '*' (as in *.s3.*.amazonaws.com); partial-label wildcards such as *-api are allowed only in the first label", orig)
		}
	}
	if (labels[0] == "*" || labels[0] == "**") && len(labels) <= 2 {
		return nil, fmt.Sprintf("host %q is a top-level-domain wildcard; use at least two labels after the wildcard, e.g. *.example.com", orig)
	}
	p, err := compileHostPattern(h)
	if err != nil {
		return nil, fmt.Sprintf("%v; fix the pattern, e.g. *.example.com", err)
	}
	return p, ""
}
