package policy

import (
	"strconv"
	"strings"
)

// Error is one validation error at a position of a policy file. Line and Col
// are 1-based; Col is 0 when the YAML parser reported only a line.
type Error struct {
	File string
	Line int
	Col  int
	Msg  string
}

// Error formats the error like a compiler: "policy.yaml:12:9: msg".
func (e *Error) Error() string {
	return formatPos(e.File, e.Line, e.Col) + ": " + e.Msg
}

// ErrorList is every error found in one policy file, in file order.
type ErrorList []*Error

// Error joins the errors one per line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Notice reports a field that was accepted and kept in the parsed policy
// but is not enforced by stockade yet (L7 rules, TLS mode, middlewares, ...),
// or a construct that loads but does less than it seems to.
type Notice struct {
	File string
	Line int
	Col  int
	Msg  string
}

// String formats the notice like an error: "policy.yaml:30:9: msg".
func (n Notice) String() string {
	return formatPos(n.File, n.Line, n.Col) + ": " + n.Msg
}

func formatPos(file string, line, col int) string {
	if file == "" {
		file = "<policy>"
	}
	s := file + ":" + strconv.Itoa(line)
	if col > 0 {
		s += ":" + strconv.Itoa(col)
	}
	return s
}
