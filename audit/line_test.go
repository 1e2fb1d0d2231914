package audit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/policy/reason"
)

// formattedLine is the one-line form as it was first written, with fmt:
// the oracle AppendLine must agree with on every event.
func formattedLine(e *Event) string {
	var b strings.Builder
	if e.ClassUID == ClassLifecycle {
		fmt.Fprintf(&b, "LIFECYCLE:%s [%s] %s", Escape(strings.ToUpper(e.ActivityName)), e.SeverityID.short(), Escape(e.Message))
		return b.String()
	}
	switch e.ClassUID {
	case ClassDNS:
		b.WriteString("DNS:QUERY")
	default:
		b.WriteString("NET:OPEN")
	}
	fmt.Fprintf(&b, " [%s] %s ", e.SeverityID.short(), strings.ToUpper(e.ActionID.String()))
	if e.Actor != nil && e.Actor.Path != "" {
		fmt.Fprintf(&b, "%s(%d)", Escape(e.Actor.Path), e.Actor.Pid)
	} else {
		b.WriteString("-")
	}
	switch {
	case e.Query != nil:
		fmt.Fprintf(&b, " -> %s %s", Escape(e.Query.Hostname), Escape(e.Query.Type))
		if e.Query.Rcode != "" {
			b.WriteString(" " + Escape(e.Query.Rcode))
		}
	case e.Dst != nil:
		fmt.Fprintf(&b, " -> %s:%d", Escape(e.Dst.Hostname), e.Dst.Port)
	}
	name := e.Policy.Name
	if name == "" {
		name = "-"
	}
	fmt.Fprintf(&b, " [policy:%s engine:%s] [reason:%s]", Escape(name), Escape(e.Policy.Engine), e.Reason.String())
	if len(e.Holders) > 1 {
		b.WriteString(" [holders:")
		for i, h := range e.Holders {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%s(%d)", Escape(h.Path), h.Pid)
		}
		b.WriteString("]")
	}
	return b.String()
}

// TestAppendLineAgrees checks the append-based one-line form against the
// fmt-based oracle over random events: every class, action and severity,
// absent and present fields, and strings a workload could choose (control
// characters, line separators, invalid UTF-8, backslashes, non-ASCII).
func TestAppendLineAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 2))
	words := []string{"", "-", "/usr/bin/curl", "api.test", "A", "AAAA", "NOERROR", "REFUSED", "opa", "é/ü", "a\nb", "x\u2028y", "bad\xffutf8",
		`back\slash`, "tab\there", "\x1b[31mred", "Started", "policy_reload", strings.Repeat("long", 40)}
	pick := func() string { return words[rng.IntN(len(words))] }
	classes := []Class{ClassNetwork, ClassDNS, ClassLifecycle}
	codes := []reason.Code{reason.None, reason.EndpointNotAllowed, reason.BinaryNotAllowed, reason.BoundaryFault}
	buf := make([]byte, 0, 256)
	for i := 0; i < 20000; i++ {
		e := NewDecision(classes[rng.IntN(len(classes))], rng.IntN(2) == 0, codes[rng.IntN(len(codes))])
		e.ActionID = Action(rng.IntN(3))
		e.SeverityID = Severity(rng.IntN(6))
		e.ActivityName, e.Message = pick(), pick()
		if rng.IntN(4) > 0 {
			e.Actor = &Process{Path: pick(), Pid: rng.IntN(1 << 22)}
		}
		switch rng.IntN(3) {
		case 0:
			e.Query = &Query{Hostname: pick(), Type: pick(), Rcode: pick()}
		case 1:
			e.Dst = &Endpoint{Hostname: pick(), Port: rng.IntN(70000)}
		}
		e.Policy = PolicyRef{Name: pick(), Engine: pick()}
		for n := rng.IntN(4); n > 0; n-- {
			e.Holders = append(e.Holders, Process{Path: pick(), Pid: rng.IntN(1 << 22)})
		}
		want := formattedLine(&e)
		if got := e.Line(); got != want {
			t.Fatalf("event %d: Line\n got %q\nwant %q", i, got, want)
		}
		buf = e.AppendLine(buf[:0])
		if string(buf) != want {
			t.Fatalf("event %d: AppendLine on a reused buffer\n got %q\nwant %q", i, buf, want)
		}
	}
}
