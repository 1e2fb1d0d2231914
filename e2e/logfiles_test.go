package e2e

import (
	"path/filepath"

	"github.com/stockade-dev/stockade/contract"
)

// sandboxLog is the path of file in the log directory of the current
// creation of sandbox name (contract.StateDir.Logs; a deleted sandbox's
// log directory is removed, so there is at most one).
func sandboxLog(state, name, file string) string {
	sb := filepath.Join(contract.StateDir(state).Sandboxes(), name)
	dirs, _ := filepath.Glob(filepath.Join(sb, contract.LogsDir, "*"))
	if len(dirs) == 0 {
		return filepath.Join(sb, contract.LogsDir, "none", file)
	}
	return filepath.Join(dirs[len(dirs)-1], file)
}
