package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/internal/clock"
	"github.com/stockade-dev/stockade/policy/reason"
)

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
	c := clock.NewFake(time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC))
	limit := NewDenialLimit(log, 10, time.Minute, WithLimitClock(c))
	sink := LogSink{Log: log, AllowedAtDebug: true, Denials: limit}

	denied := NewDecision(ClassDNS, false, reason.PolicyDNSIneligible)
	denied.Query = &Query{Hostname: "unlisted.test", Type: "A", Rcode: "REFUSED"}
	allowedAtInfo := sink
	allowedAtInfo.AllowedAtDebug = false

	for range 25 {
		sink.Record(denied)
	}
	allowedAtInfo.Record(NewDecision(ClassNetwork, true, reason.None)) // not a denial: not limited
	c.Advance(30 * time.Second)
	sink.RecordBatch([]Event{denied, denied, denied}) // same window: counted
	if d, n := countLines(logLines(t, &buf)); d != 10 || n != 0 {
		t.Fatalf("within the window: %d denial lines and %d reported, want 10 and 0 (the report waits for the window's end)", d, n)
	}
	if n := c.Pending(); n != 1 {
		t.Fatalf("%d reports scheduled, want one", n)
	}
	if !strings.Contains(buf.String(), `"level":"info"`) {
		t.Fatalf("the allowed line was held back by the limit:\n%s", buf.String())
	}

	c.Advance(29 * time.Second) // the window's last second: no report yet
	if _, n := countLines(logLines(t, &buf)); n != 0 {
		t.Fatalf("%d reported before the window ended", n)
	}
	c.Advance(time.Second)
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
	if n := c.Pending(); n != 0 {
		t.Fatalf("Flush left %d reports scheduled, want the window's cancelled", n)
	}
	c.Advance(time.Hour)
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
	c := clock.NewFake(time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC))
	limit := NewDenialLimit(log, 2, time.Minute, WithLimitClock(c))
	denied := NewDecision(ClassNetwork, false, reason.EndpointNotAllowed)
	sink := LogSink{Log: log, Denials: limit}
	for range 3 {
		sink.Record(denied)
	}
	c.Advance(-time.Hour)
	sink.Record(denied)
	if d, _ := countLines(logLines(t, &buf)); d != 3 {
		t.Fatalf("%d denial lines, want 3 (2, then 1 in the window the clock's jump back started)", d)
	}
}

// A time read a little before the current window opened (a batch's, read
// once before its events) counts in that window: it neither opens a new
// one nor lets more lines through.
func TestDenialLimitLateBatchTime(t *testing.T) {
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	start := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	limit := NewDenialLimit(log, 2, time.Minute, WithLimitClock(c))
	for range 3 {
		limit.allow(start.Add(time.Minute)) // opens the window at 17:01
	}
	late := start.Add(time.Minute - time.Millisecond) // read before 17:01, used after
	for i := range 2 {
		if limit.allow(late) {
			t.Fatalf("late denial %d let through: the window was reset", i+1)
		}
	}
	limit.Flush()
	if !strings.Contains(buf.String(), `"denialsNotLogged":3`) {
		t.Fatalf("report %q, want 3 denials not logged", buf.String())
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
