package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/policy/reason"
)

// fakeTimers is the clock seam of a DenialLimit: the time is set by the
// test, and a scheduled report runs when the test says.
type fakeTimers struct {
	now   time.Time
	after []time.Duration
	due   []func()
}

func (f *fakeTimers) clock() LimitOption {
	return WithLimitClock(func() time.Time { return f.now }, func(d time.Duration, fn func()) func() bool {
		f.after = append(f.after, d)
		f.due = append(f.due, fn)
		i := len(f.due) - 1
		return func() bool { live := f.due[i] != nil; f.due[i] = nil; return live }
	})
}

// fire runs the scheduled reports that were not cancelled.
func (f *fakeTimers) fire() {
	for i, fn := range f.due {
		if fn != nil {
			f.due[i] = nil
			fn()
		}
	}
}

// logLines splits a JSON log into its lines' decoded objects.
func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// countLines counts denial lines and the denials the reports say were left
// out.
func countLines(lines []map[string]any) (denials, notLogged int) {
	for _, m := range lines {
		if n, ok := m["denialsNotLogged"].(float64); ok {
			notLogged += int(n)
		} else if strings.Contains(m["message"].(string), "DENIED") {
			denials++
		}
	}
	return denials, notLogged
}

// A flood of denials past the limit: the log keeps max lines per window and
// one line with the count of the rest when the window ends; every denial is
// a line or in a count; other lines are not limited; a new window logs again;
// Flush reports what is pending, once.
func TestDenialLimitBoundsTheLogAndCountsTheRest(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf).Level(zerolog.InfoLevel)
	ft := &fakeTimers{now: time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)}
	limit := NewDenialLimit(log, 10, time.Minute, ft.clock())
	sink := LogSink{Log: log, AllowedAtDebug: true, Denials: limit}

	denied := NewDecision(ClassDNS, false, reason.PolicyDNSIneligible)
	denied.Query = &Query{Hostname: "unlisted.test", Type: "A", Rcode: "REFUSED"}
	allowedAtInfo := sink
	allowedAtInfo.AllowedAtDebug = false

	for range 25 {
		sink.Record(denied)
	}
	allowedAtInfo.Record(NewDecision(ClassNetwork, true, reason.None)) // not a denial: not limited
	ft.now = ft.now.Add(30 * time.Second)
	sink.RecordBatch([]Event{denied, denied, denied}) // same window: counted
	if d, n := countLines(logLines(t, &buf)); d != 10 || n != 0 {
		t.Fatalf("within the window: %d denial lines and %d reported, want 10 and 0 (the report waits for the window's end)", d, n)
	}
	if len(ft.after) != 1 || ft.after[0] != time.Minute {
		t.Fatalf("reports scheduled after %v, want one after the window (1m0s from its start)", ft.after)
	}
	if !strings.Contains(buf.String(), `"level":"info"`) {
		t.Fatalf("the allowed line was held back by the limit:\n%s", buf.String())
	}

	ft.now = ft.now.Add(30 * time.Second)
	ft.fire()
	lines := logLines(t, &buf)
	if d, n := countLines(lines); d != 10 || n != 18 {
		t.Fatalf("after the window: %d denial lines and %d reported, want 10 and 18", d, n)
	}
	last := lines[len(lines)-1]
	if last["level"] != "warn" || last["since"] != "2026-12-04T17:00:00Z" || !strings.Contains(last["message"].(string), "in the audit file only") {
		t.Fatalf("report line: %v", last)
	}

	// The next window logs again up to the limit; Flush reports its rest
	// at once and cancels the scheduled report; a second Flush says nothing.
	for range 12 {
		sink.Record(denied)
	}
	limit.Flush()
	before := buf.Len()
	ft.fire()
	limit.Flush()
	if buf.Len() != before {
		t.Fatalf("a cancelled report or a second Flush wrote: %s", buf.String()[before:])
	}
	if d, n := countLines(logLines(t, &buf)); d != 20 || n != 20 {
		t.Fatalf("two windows: %d denial lines and %d reported, want 20 and 20 (every denial a line or counted)", d, n)
	}
}

// A clock that goes back starts a new window rather than holding every
// line back until it catches up.
func TestDenialLimitClockGoingBack(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	ft := &fakeTimers{now: time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)}
	limit := NewDenialLimit(log, 2, time.Minute, ft.clock())
	denied := NewDecision(ClassNetwork, false, reason.EndpointNotAllowed)
	sink := LogSink{Log: log, Denials: limit}
	for range 3 {
		sink.Record(denied)
	}
	ft.now = ft.now.Add(-time.Hour)
	sink.Record(denied)
	if d, _ := countLines(logLines(t, &buf)); d != 3 {
		t.Fatalf("%d denial lines, want 3 (2, then 1 in the window the clock's jump back started)", d)
	}
}

// Without a limit every denial is logged (the log is the only record).
func TestLogSinkWithoutLimitLogsEveryDenial(t *testing.T) {
	var buf bytes.Buffer
	sink := LogSink{Log: zerolog.New(&buf)}
	for range 500 {
		sink.Record(NewDecision(ClassNetwork, false, reason.EndpointNotAllowed))
	}
	if d, _ := countLines(logLines(t, &buf)); d != 500 {
		t.Fatalf("%d denial lines, want 500", d)
	}
}
