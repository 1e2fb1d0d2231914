package policy

import (
	"fmt"
	"github.com/stockade-dev/stockade/internal/editdist"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// resolve follows aliases and charges the node budget.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for hops := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && hops < 64; hops++ {
		n = n.Alias
	}
	p.nodes++
	return n
}

// budgetLeft reports whether the walk may continue; it records one error
// the first time the policy exceeds maxNodes.
func (p *parser) budgetLeft(n *yaml.Node) bool {
	if p.nodes <= maxNodes {
		return true
	}
	if !p.tooLarge {
		p.tooLarge = true
		p.errorf(n, "policy too large: more than %d YAML nodes (aliases expanded)", maxNodes)
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node's type and value for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.AliasNode:
		return "an unresolved alias"
	}
	switch n.ShortTag() {
	case "!!str":
		return fmt.Sprintf("string %q", n.Value)
	case "!!int":
		return "integer " + n.Value
	case "!!bool":
		return "boolean " + n.Value
	case "!!float":
		return "number " + n.Value
	default:
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
}

// mapping walks a mapping node and calls fn for each key. valid lists the
// accepted keys (nil accepts any key). It returns false, with no error, for
// an absent or null node and false, with an error, for a non-mapping.
func (p *parser) mapping(n *yaml.Node, what string, valid []string, fn func(key string, k, v *yaml.Node)) bool {
	n = p.resolve(n)
	if isNull(n) {
		return false
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: want a mapping, got %s", what, describe(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content) && p.budgetLeft(n); i += 2 {
		k, v := p.resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errorf(k, "%s: keys must be strings, got %s", what, describe(k))
			continue
		}
		key := k.Value
		if valid != nil && !slices.Contains(valid, key) {
			p.errorf(k, "unknown key %q in %s; valid keys: %s%s", key, what, strings.Join(valid, ", "), suggest(key, valid))
			continue
		}
		if seen[key] {
			p.errorf(k, "duplicate key %q in %s", key, what)
			continue
		}
		seen[key] = true
		fn(key, k, v)
	}
	return true
}

// seq walks a list node; an absent or null node is an empty list.
func (p *parser) seq(n *yaml.Node, what string, fn func(item *yaml.Node)) {
	n = p.resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s: want a list, got %s", what, describe(n))
		return
	}
	for _, item := range n.Content {
		if !p.budgetLeft(n) {
			return
		}
		fn(p.resolve(item))
	}
}

// str reads a scalar as text (numbers are kept as written).
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	n = p.resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, "%s: want a string, got %s", what, describe(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, what string) (int64, bool) {
	n = p.resolve(n)
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, "%s: want an integer, got %s", what, describe(n))
		return 0, false
	}
	return v, true
}

func (p *parser) boolean(n *yaml.Node, what string) (bool, bool) {
	n = p.resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		p.errorf(n, "%s: want true or false, got %s", what, describe(n))
		return false, false
	}
	return v, true
}

// keep checks the shape of an accepted-but-unenforced field and returns it
// decoded. A null value counts as absent.
func (p *parser) keep(key string, k, v *yaml.Node, kind valueKind) (Field, bool) {
	f := Field{Key: key, Line: k.Line, Col: k.Column}
	v = p.resolve(v)
	if isNull(v) {
		return f, false
	}
	var ok bool
	switch kind {
	case kindString:
		f.Value, ok = p.str(v, key)
		return f, ok
	case kindBool:
		f.Value, ok = p.boolean(v, key)
		return f, ok
	case kindInt:
		f.Value, ok = p.integer(v, key)
		return f, ok
	case kindList:
		ok = v.Kind == yaml.SequenceNode
	case kindMap:
		ok = v.Kind == yaml.MappingNode
	default:
		ok = true
	}
	if !ok {
		p.errorf(v, "%s: want %s, got %s", key, kind, describe(v))
		return f, false
	}
	if err := v.Decode(&f.Value); err != nil {
		p.errorf(v, "%s: %v", key, err)
		return f, false
	}
	return f, true
}

// suggest returns `; did you mean "x"?` for the valid key nearest to key,
// or "" when none is close.
func suggest(key string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		if d := editdist.Distance(key, v); d < bestD {
			best, bestD = v, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}
