package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stockade-dev/stockade/internal/sysmon"
)

// TestSupervisorKeepsSysmonAwake: a sandbox's supervisor runs itself again
// at start with Go's monitor thread kept out of deep sleep
// (internal/sysmon): its environment has the setting, it keeps its name
// (that of the gateway's binary, not "exe"), and the workload's
// environment, which is its own, does not get it.
func TestSupervisorKeepsSysmonAwake(t *testing.T) {
	w := newWorld(t, 0)
	s := w.create("sysmon", `exec sleep 1000`)
	proc := func(pid int, file string) string {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if env := proc(s.SupervisorPid, "environ"); !strings.Contains("\x00"+env+"\x00", "\x00GODEBUG="+sysmon.Setting+"\x00") {
		t.Fatalf("supervisor %d's environment lacks GODEBUG=%s:\n%q", s.SupervisorPid, sysmon.Setting, env)
	}
	if got, want := proc(s.SupervisorPid, "comm"), proc(w.gw.Process.Pid, "comm"); got != want {
		t.Fatalf("supervisor %d is named %q after its re-exec, the gateway (same binary) %q", s.SupervisorPid, got, want)
	}
	out, errOut, code := w.execIn("sysmon", "env")
	if code != 0 {
		t.Fatalf("exec env: exit %d %s", code, errOut)
	}
	if strings.Contains(out, "GODEBUG") {
		t.Fatalf("the workload's environment has GODEBUG:\n%s", out)
	}
}
