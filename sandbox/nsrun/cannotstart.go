package nsrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrCannotStart marks a Start failure that a retry cannot heal: the
// command does not exist or cannot be executed inside the sandbox (execve
// ENOENT, EACCES, ENOEXEC; not found in PATH), the working directory is
// missing, or the filesystem policy is a hard_requirement the sandbox
// cannot meet (a missing path, no Landlock). Start's error wraps it
// (errors.Is) and its text names the path and the fix.
var ErrCannotStart = errors.New("nsrun: the sandbox cannot start")

// cannotStartError is a permanent failure: its text is the cause's.
type cannotStartError struct{ err error }

func (e *cannotStartError) Error() string        { return e.err.Error() }
func (e *cannotStartError) Unwrap() error        { return e.err }
func (e *cannotStartError) Is(target error) bool { return target == ErrCannotStart }

// CannotStartReason returns the message of the permanent failure in err
// (the path and the fix, without the stages' prefixes) and true, or "" and
// false when err is not ErrCannotStart.
func CannotStartReason(err error) (string, bool) {
	var e *cannotStartError
	if errors.As(err, &e) {
		return e.Error(), true
	}
	return "", false
}

// failure is the msgFailed reporting err to a parent stage: a permanent
// failure travels as its own message, marked.
func failure(id uint64, err error) message {
	if reason, ok := CannotStartReason(err); ok {
		return message{Kind: msgFailed, ID: id, Error: reason, Permanent: true}
	}
	return message{Kind: msgFailed, ID: id, Error: err.Error()}
}

// permanent marks err as a failure no retry heals.
func permanent(err error) error { return &cannotStartError{err: err} }

// permanentText rebuilds a permanent failure received from another stage
// (the wire carries its text and the mark).
func permanentText(msg string) error { return permanent(errors.New(msg)) }

// execFailure explains a failed execve of path: what is wrong and how to
// fix it. ENOENT, EACCES, ENOEXEC, ENOTDIR and ELOOP are permanent (the
// sandbox's view does not change between attempts); anything else (ENOMEM,
// EAGAIN, ...) may heal.
func execFailure(path string, err error, cfg *stageConfig) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		if _, serr := os.Stat(path); serr == nil {
			return permanent(fmt.Errorf("execve %s: %w: the file exists but its interpreter (#! line) or dynamic loader does not exist in the sandbox: check that it lies under a path the sandbox sees (%s)",
				path, err, strings.Join(visiblePaths(cfg), ", ")))
		}
		return permanent(fmt.Errorf("the command %s does not exist in the sandbox: check the path (the sandbox sees %s) (execve %s: %w)",
			path, strings.Join(visiblePaths(cfg), ", "), path, err))
	case errors.Is(err, unix.EACCES):
		return permanent(fmt.Errorf("execve %s: %w: the policy's filesystem_policy does not allow executing it (list %s, or a directory above it, in read_only), or the file is not executable (chmod +x)",
			path, err, filepath.Dir(path)))
	case errors.Is(err, unix.ENOEXEC):
		return permanent(fmt.Errorf("execve %s: %w: it is not a program this machine can run (a script needs a #! line)", path, err))
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return permanent(fmt.Errorf("execve %s: %w: check the path of the command", path, err))
	}
	return fmt.Errorf("execve %s: %w", path, err)
}

// visiblePaths lists, for a message, the top-level paths the workload can
// see: the mount view's baseline and the policy's and baseline's lists that
// exist inside, /tmp and the workspace.
func visiblePaths(cfg *stageConfig) []string {
	seen := map[string]bool{"/tmp": true, WorkspaceMount: true} // always there
	out := []string{"/tmp", WorkspaceMount}
	all := append(append(append(append(baselinePaths(), cfg.BaselineReadOnly...), cfg.ReadOnly...), cfg.ReadWrite...), cfg.BaselineReadWrite...)
	for _, p := range all {
		p = filepath.Clean(p)
		if seen[p] || strings.HasPrefix(p, "/dev/") || p == "/proc" || strings.HasPrefix(p, "/proc/") {
			continue
		}
		seen[p] = true
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
