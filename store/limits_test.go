package store

import (
	"encoding/json"
	"testing"
)

// TestLimitsOrLogFields: the log's limits of a record written before they
// existed are the defaults; ones it has (or -1: none) are kept.
func TestLimitsOrLogFields(t *testing.T) {
	def := Limits{Pids: 512, LogBytes: 64 << 20, LogLinesPerSec: 1000, LogBurst: 10000}
	var old Record
	if err := json.Unmarshal([]byte(`{"schema":1,"spec":{"name":"a","limits":{"pids":64}}}`), &old); err != nil {
		t.Fatal(err)
	}
	if got := old.Spec.Limits.Or(def); got != (Limits{Pids: 64, LogBytes: 64 << 20, LogLinesPerSec: 1000, LogBurst: 10000}) {
		t.Fatalf("an earlier record's limits: %+v", got)
	}
	own := Limits{LogBytes: 1 << 20, LogLinesPerSec: -1, LogBurst: 5}
	if got := own.Or(def); got != (Limits{Pids: 512, LogBytes: 1 << 20, LogLinesPerSec: -1, LogBurst: 5}) {
		t.Fatalf("asked limits: %+v", got)
	}
	b, err := json.Marshal(own)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"logBytes":1048576,"logLinesPerSec":-1,"logBurst":5}` {
		t.Fatalf("stored as %s", b)
	}
}
