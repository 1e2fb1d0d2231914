package sandbox

import (
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/messages"
)

// TestCreateLogLimits: a create's log limits are kept in the record with
// the defaults for what it left out, and shown by get before any report;
// limits a create may not ask for are refused and nothing is created.
func TestCreateLogLimits(t *testing.T) {
	w := newWorld(t)
	r := w.ask(&messages.CreateRequest{Name: "logs", Policy: []byte("version: 1\n"), Limits: &messages.Limits{LogBytes: 1 << 20, LogLinesPerSec: -1}})
	if r.Status != messages.Status_STATUS_OK {
		t.Fatalf("create: %v", r)
	}
	l := w.mustRecord("logs").Spec.Limits
	def := DefaultLimits()
	if l.LogBytes != 1<<20 || l.LogLinesPerSec != -1 || l.LogBurst != def.LogBurst || l.Pids != def.Pids {
		t.Fatalf("record's limits %+v: want log 1 MiB, no line rate, the default burst and pids", l)
	}
	got := w.get("logs").Sandbox.GetResources().GetLimits()
	if got.GetLogBytes() != 1<<20 || got.GetLogLinesPerSec() != -1 || got.GetLogBurst() != def.LogBurst {
		t.Fatalf("get's limits before a report: %v", got)
	}
	if def.LogBytes != 64<<20 || def.LogLinesPerSec != 1000 || def.LogBurst != 10000 {
		t.Fatalf("default log limits %+v", def)
	}

	for _, tc := range []struct {
		name   string
		limits *messages.Limits
		want   string
	}{
		{"small", &messages.Limits{LogBytes: 100 << 10}, "at least 262144"},
		{"negative", &messages.Limits{LogBytes: -2}, "-1 for none"},
		{"rate", &messages.Limits{LogLinesPerSec: -5}, "-1 for none"},
		{"burst", &messages.Limits{LogBurst: -1}, "log burst -1"},
	} {
		r := w.ask(&messages.CreateRequest{Name: "bad-" + tc.name, Policy: []byte("version: 1\n"), Limits: tc.limits})
		if r.Status != messages.Status_STATUS_INVALID || !strings.Contains(r.Message, tc.want) {
			t.Errorf("%s: %v %q, want invalid saying %q", tc.name, r.Status, r.Message, tc.want)
		}
		if _, err := w.record("bad-" + tc.name); !isNotFound(err) {
			t.Errorf("%s: refused, yet a record: %v", tc.name, err)
		}
	}
}
