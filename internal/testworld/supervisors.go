package testworld

import (
	"os"
	"strconv"
	"strings"

	"github.com/stockade-dev/stockade/contract"
)

// IsSupervisorOf says whether a /proc/<pid>/cmdline is that of a supervisor
// of a sandbox under the state dir: `stockade supervisor --spec
// STATE/sandboxes/NAME/spec.json`. Another state dir, even one whose path
// has state as a prefix, is not a match.
func IsSupervisorOf(cmdline []byte, state string) bool {
	under := contract.StateDir(state).Sandboxes() + "/"
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	for i := 0; i+3 < len(args); i++ {
		if args[i+1] == "supervisor" && args[i+2] == "--spec" && strings.HasPrefix(args[i+3], under) {
			return true
		}
	}
	return false
}

// SupervisorsOf lists the running supervisors of sandboxes under the state
// dir, for a test or a benchmark to find (and at its end kill) what its own
// gateway started.
func SupervisorsOf(state string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && IsSupervisorOf(b, state) {
			out = append(out, pid)
		}
	}
	return out
}
