package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stockade-dev/stockade/messages"
)

// TestGetShowsLogLimitsAndUse: `get -o json` has the log's limits and use
// under resources, and the table says them in words.
func TestGetShowsLogLimitsAndUse(t *testing.T) {
	st := &messages.SandboxStatus{Name: "a", Phase: "Ready", SinceUnixMs: time.Now().UnixMilli(), Resources: &messages.Resources{
		Enforced: true, Limits: &messages.Limits{Pids: 512, LogBytes: 64 << 20, LogLinesPerSec: 1000, LogBurst: 10000},
		LogBytes: 3 << 19, LogDroppedLines: 42}}
	b, err := json.Marshal(viewOf(st))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Resources map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"logLimitBytes": 64 << 20, "logLinesPerSec": 1000, "logBurst": 10000, "logBytes": 3 << 19, "logDroppedLines": 42} {
		if got, ok := v.Resources[k].(float64); !ok || got != want {
			t.Errorf("resources.%s = %v, want %v (%s)", k, v.Resources[k], want, b)
		}
	}
	var tab bytes.Buffer
	tw := tabwriter.NewWriter(&tab, 0, 4, 2, ' ', 0)
	statusTable(tw, viewOf(st), time.Now())
	_ = tw.Flush()
	for _, want := range []string{"log 64 MiB at 1000 lines/s (burst 10000)", "log 1.5 MiB (42 lines dropped)"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	st.Resources.Limits = &messages.Limits{}
	tab.Reset()
	statusTable(tw, viewOf(st), time.Now())
	_ = tw.Flush()
	if !strings.Contains(tab.String(), "log none at none") {
		t.Errorf("no log limits in the table:\n%s", tab.String())
	}
}

// TestCreateLogFlags: bad log flags are usage errors (exit 2) before any
// gateway is asked.
func TestCreateLogFlags(t *testing.T) {
	for _, args := range [][]string{{"--log-size", "lots"}, {"--log-rate", "fast"}, {"--log-burst", "1.5"}} {
		full := append([]string{"sandbox", "create", "x", "--policy", "/dev/null", "--gateway", "127.0.0.1:1"}, args...)
		if _, errOut, code := run(t, full...); code != exitUsage || !strings.Contains(errOut, args[0]) {
			t.Errorf("%v: exit %d %q, want 2 naming %s", args, code, errOut, args[0])
		}
	}
	for s, want := range map[string]int64{"": 0, "0": 0, "none": -1, "-1": -1, "16M": 16 << 20, "256K": 256 << 10} {
		if got, err := limitBytes(s); err != nil || got != want {
			t.Errorf("limitBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
}
