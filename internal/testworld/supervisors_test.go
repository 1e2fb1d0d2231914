package testworld

import (
	"strings"
	"testing"
)

func TestIsSupervisorOf(t *testing.T) {
	state := "/tmp/stockade-bench-1/gateway-state"
	cmd := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, c := range []struct {
		name    string
		cmdline []byte
		want    bool
	}{
		{"ours", cmd("/work/main/bin/stockade", "supervisor", "--spec", state+"/sandboxes/bench/spec.json"), true},
		{"another state dir", cmd("/bin/stockade", "supervisor", "--spec", "/tmp/other/sandboxes/bench/spec.json"), false},
		{"a prefix of ours", cmd("/bin/stockade", "supervisor", "--spec", state+"2/sandboxes/bench/spec.json"), false},
		{"the gateway", cmd("/bin/stockade", "gateway", "run", "--state-dir", state), false},
		{"no spec", cmd("/bin/stockade", "supervisor"), false},
		{"spec flag without a value", cmd("/bin/stockade", "supervisor", "--spec"), false},
		{"empty", nil, false},
	} {
		if got := IsSupervisorOf(c.cmdline, state); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
