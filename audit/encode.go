package audit

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends the JSON encoding of e to b and returns the extended
// buffer. The bytes are exactly those of json.Marshal(e): the same field
// order, omitempty rules, map key order (sorted bytewise) and string
// escaping (HTML-safe: <, > and & as \u003c, \u003e and \u0026; U+2028 and
// U+2029 escaped; invalid UTF-8 replaced by \ufffd). TimeMs is written as it
// is; File sets it from Time when it records. TestAppendJSONMatchesMarshal
// holds the two encodings equal and TestEncodedTypesUnchanged fails when a
// field is added to an encoded type without teaching this encoder.
func (e *Event) AppendJSON(b []byte) []byte { return appendEvent(b, e, e.TimeMs) }

// appendEvent is AppendJSON with the time field given, so that a sink can
// encode an event with TimeMs derived from Time without copying or changing
// the caller's Event.
func appendEvent(b []byte, e *Event, timeMs int64) []byte {
	b = append(b, `{"time":`...)
	b = strconv.AppendInt(b, timeMs, 10)
	b = append(b, `,"class_uid":`...)
	b = strconv.AppendInt(b, int64(e.ClassUID), 10)
	b = append(b, `,"class_name":`...)
	b = appendString(b, e.ClassName)
	b = append(b, `,"activity_id":`...)
	b = strconv.AppendInt(b, int64(e.ActivityID), 10)
	b = append(b, `,"activity_name":`...)
	b = appendString(b, e.ActivityName)
	b = append(b, `,"action_id":`...)
	b = strconv.AppendInt(b, int64(e.ActionID), 10)
	b = append(b, `,"action":`...)
	b = appendString(b, e.ActionName)
	b = append(b, `,"disposition":`...)
	b = appendString(b, e.Disposition)
	b = append(b, `,"severity_id":`...)
	b = strconv.AppendInt(b, int64(e.SeverityID), 10)
	b = append(b, `,"severity":`...)
	b = appendString(b, e.SeverityName)
	if e.Sandbox != "" {
		b = append(b, `,"sandbox":`...)
		b = appendString(b, e.Sandbox)
	}
	if e.Actor != nil {
		b = append(b, `,"actor":`...)
		b = appendProcess(b, e.Actor)
	}
	if len(e.Holders) > 0 {
		b = append(b, `,"holders":[`...)
		for i := range e.Holders {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendProcess(b, &e.Holders[i])
		}
		b = append(b, ']')
	}
	if e.Src != nil {
		b = append(b, `,"src_endpoint":`...)
		b = appendEndpoint(b, e.Src)
	}
	if e.Dst != nil {
		b = append(b, `,"dst_endpoint":`...)
		b = appendEndpoint(b, e.Dst)
	}
	if q := e.Query; q != nil {
		b = append(b, `,"query":{"hostname":`...)
		b = appendString(b, q.Hostname)
		b = append(b, `,"type":`...)
		b = appendString(b, q.Type)
		if q.Rcode != "" {
			b = append(b, `,"rcode":`...)
			b = appendString(b, q.Rcode)
		}
		b = append(b, '}')
	}
	b = append(b, `,"policy":{"name":`...)
	b = appendString(b, e.Policy.Name)
	if e.Policy.PolicyName != "" {
		b = append(b, `,"policyName":`...)
		b = appendString(b, e.Policy.PolicyName)
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, e.Policy.Version, 10)
	b = append(b, `,"engine":`...)
	b = appendString(b, e.Policy.Engine)
	b = append(b, '}')
	if e.Reason != "" {
		b = append(b, `,"status_detail":`...)
		b = appendString(b, string(e.Reason))
	}
	if e.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, e.Message)
	}
	if len(e.Unmapped) > 0 {
		b = append(b, `,"unmapped":`...)
		b = appendStringMap(b, e.Unmapped)
	}
	return append(b, '}')
}

// appendProcess appends a Process as encoding/json does (every field
// omitempty, so an empty Process is {}).
func appendProcess(b []byte, p *Process) []byte {
	b = append(b, '{')
	sep := false
	if p.Path != "" {
		b = append(b, `"path":`...)
		b = appendString(b, p.Path)
		sep = true
	}
	if p.Pid != 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"pid":`...)
		b = strconv.AppendInt(b, int64(p.Pid), 10)
		sep = true
	}
	if len(p.Ancestors) > 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"ancestors":[`...)
		for i, a := range p.Ancestors {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, a)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendEndpoint appends an Endpoint as encoding/json does (every field
// omitempty).
func appendEndpoint(b []byte, ep *Endpoint) []byte {
	b = append(b, '{')
	sep := false
	if ep.Hostname != "" {
		b = append(b, `"hostname":`...)
		b = appendString(b, ep.Hostname)
		sep = true
	}
	if ep.IP != "" {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"ip":`...)
		b = appendString(b, ep.IP)
		sep = true
	}
	if ep.Port != 0 {
		if sep {
			b = append(b, ',')
		}
		b = append(b, `"port":`...)
		b = strconv.AppendInt(b, int64(ep.Port), 10)
	}
	return append(b, '}')
}

// appendStringMap appends a non-empty map as encoding/json does: keys
// sorted bytewise (by the key before escaping), keys and values escaped as
// strings.
func appendStringMap(b []byte, m map[string]string) []byte {
	// Unmapped holds a handful of keys: sort them in a stack array when
	// they fit, so the common case does not allocate.
	var stack [8]string
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

// jsonSafe reports the ASCII bytes encoding/json writes as they are when it
// escapes HTML: printable ASCII and DEL, except ", \, <, > and &.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does
// with HTML escaping on (its default for Marshal).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				// Other control bytes, and <, > and & (HTML-safe).
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
