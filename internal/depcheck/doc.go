// Package depcheck owns the rule that heavy dependencies stay where they
// belong: OPA (about 20 MB) only in packages that decide policy, and no
// actor runtime in the pure mechanics packages. It has no code, only a test
// that reads `go list -deps` of each light package.
package depcheck
