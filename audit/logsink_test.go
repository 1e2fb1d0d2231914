package audit

import (
	"bytes"
	"testing"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/policy/reason"
)

// eventsCalls records WriteEvents calls.
type eventsCalls struct{ calls [][]byte }

func (e *eventsCalls) WriteEvents(p []byte) error {
	e.calls = append(e.calls, bytes.Clone(p))
	return nil
}

// noWrites fails the test on any write: with Out set, a batch must not
// reach the logger's own writer line by line.
type noWrites struct{ t *testing.T }

func (w noWrites) Write(p []byte) (int, error) {
	w.t.Errorf("a batch line went to the logger's writer: %s", p)
	return len(p), nil
}

// With Out, a batch's log lines are the ones Record writes one by one
// (same levels, same lines, allowed ones left out at debug), handed over
// in one call; a batch with nothing to log makes no call.
func TestLogSinkBatchOneWrite(t *testing.T) {
	batch := []Event{
		NewDecision(ClassDNS, false, reason.PolicyDNSIneligible),
		NewDecision(ClassDNS, true, reason.None), // debug: not logged at info
		NewDecision(ClassNetwork, false, reason.EndpointNotAllowed),
		NewDecision(ClassDNS, false, reason.PolicyDNSIneligible),
	}
	batch[0].Query = &Query{Hostname: "a.test", Type: "A", Rcode: "REFUSED"}
	batch[1].Query = &Query{Hostname: "b.test", Type: "A", Rcode: "NOERROR"}
	batch[2].Dst = &Endpoint{Hostname: "c.test", Port: 443}
	batch[3].Query = &Query{Hostname: "d\n.test", Type: "AAAA", Rcode: "REFUSED"}

	var one bytes.Buffer
	perLine := LogSink{Log: zerolog.New(&one).Level(zerolog.InfoLevel), AllowedAtDebug: true}
	perLine.RecordBatch(batch)

	var out eventsCalls
	batched := LogSink{Log: zerolog.New(noWrites{t}).Level(zerolog.InfoLevel), AllowedAtDebug: true, Out: &out}
	batched.RecordBatch(batch)
	if len(out.calls) != 1 {
		t.Fatalf("%d WriteEvents calls, want 1", len(out.calls))
	}
	if got, want := string(out.calls[0]), one.String(); got != want || bytes.Count(out.calls[0], []byte("\n")) != 3 {
		t.Fatalf("batched lines:\n%s\nwant (3 lines, as Record writes them):\n%s", got, want)
	}

	// With lent buffers: the same lines, batch after batch (a lent buffer
	// comes back empty).
	pooled := batched
	pooled.Bufs = &Bufs{}
	for i := range 3 {
		out.calls = nil
		pooled.RecordBatch(batch)
		if len(out.calls) != 1 || string(out.calls[0]) != one.String() {
			t.Fatalf("batch %d with lent buffers: %d calls, lines:\n%s\nwant:\n%s", i, len(out.calls), bytes.Join(out.calls, nil), one.String())
		}
	}

	allowed := []Event{NewDecision(ClassDNS, true, reason.None), NewDecision(ClassDNS, true, reason.None)}
	out.calls = nil
	batched.RecordBatch(allowed)
	if len(out.calls) != 0 {
		t.Fatalf("a batch of debug-only lines made %d WriteEvents calls, want 0", len(out.calls))
	}
}
