package logs

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/stockade-dev/stockade/audit"
)

// Time layouts of Format.
const (
	layoutToday = "15:04:05.000"
	layoutOlder = "2006-01-02 15:04:05.000"
	layoutFull  = "2006-01-02T15:04:05.000Z07:00" // RFC 3339 with milliseconds
)

// Format renders e as one line of text (no newline): its time in now's
// location ("15:04:05.000" today, with the date before today, full RFC
// 3339 with milliseconds when full is set), then "out: " or "err: " and
// the workload's line ("stockade: " and the supervisor's line saying how
// many lines it dropped), or the audit or lifecycle event's one-line form.
// Control characters (but tabs) become \xNN or \uNNNN escapes: what a
// workload prints cannot drive the terminal or forge a line of its own.
func Format(e Entry, now time.Time, full bool) string {
	t := e.Time.In(now.Location())
	var stamp string
	y, m, d := now.Date()
	switch {
	case full:
		stamp = t.Format(layoutFull)
	case t.Before(time.Date(y, m, d, 0, 0, 0, 0, now.Location())):
		stamp = t.Format(layoutOlder)
	default:
		stamp = t.Format(layoutToday)
	}
	if e.Source == SourceWorkload {
		st := e.Stream
		if st != StreamErr && st != StreamStockade {
			st = StreamOut
		}
		return stamp + " " + st + ": " + audit.Printable(e.Text)
	}
	return stamp + " " + audit.Printable(e.Text)
}

// jsonEntry is the JSON form of an entry (README.md, `sandbox logs -o json`).
type jsonEntry struct {
	Time   string          `json:"time"`
	Source string          `json:"source"`
	Stream string          `json:"stream,omitempty"`
	Text   string          `json:"text"`
	Event  json.RawMessage `json:"event,omitempty"`
}

// JSON renders e as one JSON object (no newline) with the keys time (RFC
// 3339, UTC, milliseconds), source, stream (workload only), text and
// event (audit and lifecycle: the event as recorded; left out when it is
// not valid JSON).
func JSON(e Entry) ([]byte, error) {
	j := jsonEntry{Time: e.Time.UTC().Format(layoutFull), Source: e.Source, Stream: e.Stream, Text: e.Text}
	if len(e.Event) > 0 && json.Valid(e.Event) {
		j.Event = e.Event
	}
	b, err := json.Marshal(&j)
	if err != nil {
		return nil, fmt.Errorf("logs: encode entry: %w", err)
	}
	return b, nil
}
