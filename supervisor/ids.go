package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/sandbox/spec"
)

// hostIDs is a root supervisor's hold on its sandbox's host id range.
type hostIDs struct {
	r    idrange.Range // zero: unprivileged, only the supervisor's own ids map
	hold *idrange.Hold
}

func (h *hostIDs) close() {
	if h.hold != nil {
		_ = h.hold.Close()
	}
}

// holdHostIDs takes the sandbox's range as root: the spec must name one
// (never a shared default); the supervisor holds its claim on this host
// for as long as it runs, so no other sandbox of any gateway runs with
// those ids (one that does, or that still exists with them, is a
// CannotStartError naming it: a retry cannot help until it is gone); and
// the workspace's files still owned by an earlier range (a record of an
// earlier version: 100000-165535) are moved into this one first, by
// offset, so the workload finds them as it left them. dir is the
// sandbox's directory (stateDir/sandboxes/NAME). Unprivileged, nothing is
// held: only the supervisor's own uid and gid are mapped.
func holdHostIDs(sp spec.Supervisor, dir string, log zerolog.Logger) (*hostIDs, error) {
	if os.Geteuid() != 0 {
		return &hostIDs{}, nil
	}
	if sp.HostIDs == nil {
		return nil, fmt.Errorf("supervisor: the spec gives sandbox %s no host id range; as root every sandbox runs as its own (was the spec written by a gateway of an earlier version? start the sandbox through this version's gateway)", sp.Name)
	}
	r := *sp.HostIDs
	claimDir := sp.IDClaims
	if claimDir == "" {
		claimDir = idrange.DefaultClaimDir()
	}
	owner := idrange.Owner{StateDir: filepath.Dir(filepath.Dir(dir)), Sandbox: sp.Name, Workspace: sp.Workspace, Pid: os.Getpid()}
	hold, err := idrange.NewClaims(claimDir).Hold(r, owner)
	var clash *idrange.ClashError
	if errors.As(err, &clash) {
		return nil, &CannotStartError{Reason: fmt.Sprintf("sandbox %s: %v", sp.Name, err), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("supervisor: host ids %s: %w", r, err)
	}
	if len(sp.ShiftIDs) > 0 {
		st, err := idrange.Shift(sp.Workspace, sp.ShiftIDs, r)
		if err != nil {
			_ = hold.Close()
			return nil, &CannotStartError{Reason: fmt.Sprintf("sandbox %s: moving the workspace's files into its host ids %s: %v (fix that file, then start the sandbox again)", sp.Name, r, err), Err: err}
		}
		if st.Moved > 0 || st.OtherFS > 0 {
			log.Info().Int("files", st.Files).Int("moved", st.Moved).Int("other_filesystems", st.OtherFS).Str("to", r.String()).
				Msg("workspace files moved into the sandbox's host ids")
		}
	}
	return &hostIDs{r: r, hold: hold}, nil
}
