package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stockade-dev/stockade/policy/reason"
)

// Class is the OCSF class of an event. Values are the OCSF class_uid.
type Class int

// OCSF classes used by stockade.
const (
	ClassNetwork   Class = 4001 // Network Activity
	ClassDNS       Class = 4003 // DNS Activity
	ClassLifecycle Class = 6002 // Application Lifecycle
)

// String returns the OCSF class name.
func (c Class) String() string {
	switch c {
	case ClassNetwork:
		return "Network Activity"
	case ClassDNS:
		return "DNS Activity"
	case ClassLifecycle:
		return "Application Lifecycle"
	default:
		return "class(" + strconv.Itoa(int(c)) + ")"
	}
}

// Action is the OCSF action_id of a decision.
type Action int

// OCSF action ids.
const (
	ActionUnknown Action = 0
	ActionAllowed Action = 1
	ActionDenied  Action = 2
)

// String returns "Allowed", "Denied" or "Unknown".
func (a Action) String() string {
	switch a {
	case ActionAllowed:
		return "Allowed"
	case ActionDenied:
		return "Denied"
	default:
		return "Unknown"
	}
}

// Severity is the OCSF severity_id.
type Severity int

// OCSF severities used by stockade.
const (
	SeverityInformational Severity = 1
	SeverityLow           Severity = 2
	SeverityMedium        Severity = 3
	SeverityHigh          Severity = 4
)

// String returns the OCSF severity name.
func (s Severity) String() string {
	switch s {
	case SeverityInformational:
		return "Informational"
	case SeverityLow:
		return "Low"
	case SeverityMedium:
		return "Medium"
	case SeverityHigh:
		return "High"
	default:
		return "Unknown"
	}
}

func (s Severity) short() string {
	switch s {
	case SeverityInformational:
		return "INFO"
	case SeverityLow:
		return "LOW"
	case SeverityMedium:
		return "MED"
	case SeverityHigh:
		return "HIGH"
	default:
		return "UNK"
	}
}

// Process identifies the process behind a decision (the sandbox side).
type Process struct {
	Path      string   `json:"path,omitempty"`
	Pid       int      `json:"pid,omitempty"`
	Ancestors []string `json:"ancestors,omitempty"`
}

// Endpoint is a network endpoint in an event.
type Endpoint struct {
	Hostname string `json:"hostname,omitempty"`
	IP       string `json:"ip,omitempty"`
	Port     int    `json:"port,omitempty"`
}

// Query is the DNS question of a DNS event.
type Query struct {
	Hostname string `json:"hostname"`
	Type     string `json:"type"`
	Rcode    string `json:"rcode,omitempty"`
}

// PolicyRef names the policy that decided.
type PolicyRef struct {
	// Name is the network_policies key of the policy (as OpenShell).
	Name string `json:"name"`
	// PolicyName is its name field, when that differs from the key.
	PolicyName string `json:"policyName,omitempty"`
	Version    uint64 `json:"version"`
	Engine     string `json:"engine"`
}

// Event is one OCSF-shaped audit event. Field names follow OCSF where OCSF
// has one; stockade-specific detail goes under Unmapped.
type Event struct {
	Time         time.Time `json:"-"`
	TimeMs       int64     `json:"time"`
	ClassUID     Class     `json:"class_uid"`
	ClassName    string    `json:"class_name"`
	ActivityID   int       `json:"activity_id"`
	ActivityName string    `json:"activity_name"`
	ActionID     Action    `json:"action_id"`
	ActionName   string    `json:"action"`
	Disposition  string    `json:"disposition"`
	SeverityID   Severity  `json:"severity_id"`
	SeverityName string    `json:"severity"`
	Sandbox      string    `json:"sandbox,omitempty"`
	Actor        *Process  `json:"actor,omitempty"`
	// Holders are every process that held the connection's socket when it
	// was decided, when more than one did (the actor among them).
	Holders  []Process         `json:"holders,omitempty"`
	Src      *Endpoint         `json:"src_endpoint,omitempty"`
	Dst      *Endpoint         `json:"dst_endpoint,omitempty"`
	Query    *Query            `json:"query,omitempty"`
	Policy   PolicyRef         `json:"policy"`
	Reason   reason.Code       `json:"status_detail,omitempty"`
	Message  string            `json:"message,omitempty"`
	Unmapped map[string]string `json:"unmapped,omitempty"`
}

// Activity ids used by stockade (OCSF: 1 = Open for network, 1 = Query for
// DNS, per-class meanings for lifecycle).
const (
	ActivityOpen  = 1
	ActivityQuery = 1
)

// NewDecision fills the derived OCSF fields of a decision event: names of
// class, activity, action, disposition and severity (denials are Medium,
// allowed decisions Informational).
func NewDecision(class Class, allowed bool, r reason.Code) Event {
	return NewDecisionAt(time.Now(), class, allowed, r)
}

// NewDecisionAt is NewDecision at a time the caller read: once for the
// queries of one DNS batch.
func NewDecisionAt(t time.Time, class Class, allowed bool, r reason.Code) Event {
	e := Event{Time: t, ClassUID: class, ClassName: class.String(), Reason: r}
	switch class {
	case ClassDNS:
		e.ActivityID, e.ActivityName = ActivityQuery, "Query"
	default:
		e.ActivityID, e.ActivityName = ActivityOpen, "Open"
	}
	if allowed {
		e.ActionID, e.Disposition, e.SeverityID = ActionAllowed, "Allowed", SeverityInformational
	} else {
		e.ActionID, e.Disposition, e.SeverityID = ActionDenied, "Blocked", SeverityMedium
	}
	e.ActionName, e.SeverityName = e.ActionID.String(), e.SeverityID.String()
	e.Policy.Engine = "opa"
	return e
}

// Line renders the one-line form shown by `sandbox logs`, e.g.
// NET:OPEN [MED] DENIED /usr/bin/curl(64) -> example.org:443 [policy:- engine:opa] [reason:endpoint_not_allowed]
func (e *Event) Line() string { return string(e.AppendLine(nil)) }

// AppendLine appends the one-line form (Line) to dst: with a reused
// buffer, a line costs no allocation unless a field needs escaping.
func (e *Event) AppendLine(dst []byte) []byte {
	if e.ClassUID == ClassLifecycle {
		dst = append(dst, "LIFECYCLE:"...)
		dst = appendEscaped(dst, strings.ToUpper(e.ActivityName))
		dst = append(dst, " ["...)
		dst = append(dst, e.SeverityID.short()...)
		dst = append(dst, "] "...)
		return appendEscaped(dst, e.Message)
	}
	switch e.ClassUID {
	case ClassDNS:
		dst = append(dst, "DNS:QUERY"...)
	default:
		dst = append(dst, "NET:OPEN"...)
	}
	dst = append(dst, " ["...)
	dst = append(dst, e.SeverityID.short()...)
	dst = append(dst, "] "...)
	dst = appendUpper(dst, e.ActionID.String())
	dst = append(dst, ' ')
	if e.Actor != nil && e.Actor.Path != "" {
		dst = appendPathPid(dst, e.Actor.Path, e.Actor.Pid)
	} else {
		dst = append(dst, '-')
	}
	switch {
	case e.Query != nil:
		dst = append(dst, " -> "...)
		dst = appendEscaped(dst, e.Query.Hostname)
		dst = append(dst, ' ')
		dst = appendEscaped(dst, e.Query.Type)
		if e.Query.Rcode != "" {
			dst = append(dst, ' ')
			dst = appendEscaped(dst, e.Query.Rcode)
		}
	case e.Dst != nil:
		dst = append(dst, " -> "...)
		dst = appendEscaped(dst, e.Dst.Hostname)
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, int64(e.Dst.Port), 10)
	}
	name := e.Policy.Name
	if name == "" {
		name = "-"
	}
	dst = append(dst, " [policy:"...)
	dst = appendEscaped(dst, name)
	dst = append(dst, " engine:"...)
	dst = appendEscaped(dst, e.Policy.Engine)
	dst = append(dst, "] [reason:"...)
	dst = append(dst, e.Reason.String()...)
	dst = append(dst, ']')
	if len(e.Holders) > 1 {
		dst = append(dst, " [holders:"...)
		for i, h := range e.Holders {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendPathPid(dst, h.Path, h.Pid)
		}
		dst = append(dst, ']')
	}
	return dst
}

// appendPathPid appends "PATH(PID)", the path escaped.
func appendPathPid(dst []byte, path string, pid int) []byte {
	dst = appendEscaped(dst, path)
	dst = append(dst, '(')
	dst = strconv.AppendInt(dst, int64(pid), 10)
	return append(dst, ')')
}

// appendEscaped appends Escape(s) to dst (s itself when it is clean, the
// common case, without a copy in between).
func appendEscaped(dst []byte, s string) []byte { return append(dst, Escape(s)...) }

// appendUpper appends strings.ToUpper(s) for an ASCII s (the action
// names) without allocating; anything else goes through strings.ToUpper.
func appendUpper(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return append(dst, strings.ToUpper(s)...)
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Escape makes s safe for one line of text: control characters (newlines
// included), Unicode line and paragraph separators and invalid UTF-8 become
// \xNN or \uNNNN escapes and a backslash becomes \\, so what a workload
// controls (a binary path, a host name) can never start a line of its own
// or pass for another field.
func Escape(s string) string { return escape(s, true) }

// Printable is Escape for a line shown as it is (a workload's output,
// where there are no fields to forge): backslashes and tabs stay.
func Printable(s string) string { return escape(s, false) }

func escape(s string, field bool) string {
	unsafe := func(r rune) bool {
		if r == '\\' || r == '\t' {
			return field
		}
		return r == utf8.RuneError || unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
	}
	clean := true
	for _, r := range s {
		if unsafe(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && field:
			b.WriteString(`\\`)
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
