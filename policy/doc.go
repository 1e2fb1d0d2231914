// Package policy owns stockade's sandbox policy: parsing and validating the
// OpenShell v1 policy YAML (every error and every "accepted, not enforced"
// notice carries file:line:col), compiling a valid policy to Rego (package
// stockade.sandbox) plus a data document, and the versioned Engine that
// answers network and DNS decisions, one immutable snapshot per policy
// version, with a bounded decision cache. OPA's prepared queries are the
// definition; a decision index derived per version from the same data
// document (index.go) answers in front of them, and a randomized
// differential test holds it to OPA's answers field by field.
//
// OPA is imported only here: policy/reason holds the reason codes for
// packages that must not link the engine.
package policy
