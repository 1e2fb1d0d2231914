package contract

import (
	"fmt"
	"strings"
)

// MaxNameLen is the longest sandbox name: a DNS label.
const MaxNameLen = 63

// CheckName validates a sandbox name: 1-63 lower-case letters, digits and
// '-', starting and ending with a letter or digit (a DNS label). A name
// that passes holds no '/', no "..", no control character and no space: it
// is safe as one path element under the state dir, as an actor id and as
// an etcd key's last element. Every name read from a store, the wire or a
// file is checked with it before it is used.
func CheckName(name string) error {
	if !isLabel(name, MaxNameLen) {
		return fmt.Errorf("sandbox name %q: use 1-%d lower-case letters, digits and '-', starting and ending with a letter or digit", name, MaxNameLen)
	}
	return nil
}

// CheckHostName validates a gateway node's name (`gateway run --node`) or
// a host's (`--host-id`, by default the machine's host name), which what
// names in the error: 1-253 letters, digits, '-', '_' and '.', in labels
// that start and end with a letter or digit (host names with '_' exist,
// and earlier versions recorded them). Such a name holds no '/' and is
// never "." or "..".
func CheckHostName(what, name string) error {
	ok := len(name) > 0 && len(name) <= 253
	for label := range strings.SplitSeq(name, ".") {
		ok = ok && isLabel(strings.ReplaceAll(strings.ToLower(label), "_", "-"), MaxNameLen)
	}
	if !ok {
		return fmt.Errorf("%s %q: use a DNS name (letters, digits, '-', '_' and '.', each label starting and ending with a letter or digit)", what, name)
	}
	return nil
}

// MaxUIDLen is the longest creation uid (Logs' uid) accepted.
const MaxUIDLen = 64

// CheckUID validates the uid of a sandbox's creation (the name of its log
// directory): 1-64 lower-case hex digits. The empty uid of records older
// than uids is accepted by the callers that allow it, not here.
func CheckUID(uid string) error {
	if uid == "" || len(uid) > MaxUIDLen {
		return fmt.Errorf("sandbox uid %q: want 1-%d lower-case hex digits", uid, MaxUIDLen)
	}
	for i := 0; i < len(uid); i++ {
		if c := uid[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("sandbox uid %q: want 1-%d lower-case hex digits", uid, MaxUIDLen)
		}
	}
	return nil
}

// isLabel reports whether s is a DNS label of at most max bytes in
// lower case.
func isLabel(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
