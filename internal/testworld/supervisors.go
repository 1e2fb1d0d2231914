package testworld

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stockade-dev/stockade/contract"
	"github.com/stockade-dev/stockade/sandbox/cgroup"
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

// RemoveGroupsOf removes the cgroups of the sandboxes under the state dir
// once their processes are gone (waiting up to wait for each), for a test
// or a benchmark that ends by killing its gateway and supervisors: a
// killed supervisor leaves its group behind, and the kernel keeps memory
// for every group that exists. It returns what it could not remove.
func RemoveGroupsOf(state string, wait time.Duration) error {
	dirs, _ := filepath.Glob(filepath.Join(contract.StateDir(state).Sandboxes(), "*"))
	var errs []error
	for _, dir := range dirs {
		errs = append(errs, cgroup.RemoveNamed(cgroup.SandboxGroup(filepath.Base(dir), dir), wait))
	}
	return errors.Join(errs...)
}
