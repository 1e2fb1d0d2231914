package nsrun

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock through the raw system calls: the domain is applied to the exec
// stage's locked thread right before it execs, which is all the workload
// inherits, so no all-threads mechanism (go-landlock's psx, which links
// cgo into the binary) is needed.

const (
	// accessReadOnly is what a read_only path grants.
	accessReadOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	// accessFile holds the rights that apply to a non-directory.
	accessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	// accessAll: a read_write path gets whatever the ABI handles.
	accessAll = ^uint64(0)
)

// handledFS returns the filesystem rights Landlock ABI abi knows.
func handledFS(abi int) uint64 {
	switch {
	case abi >= 9: // RESOLVE_UNIX
		return 1<<17 - 1
	case abi >= 5: // IOCTL_DEV
		return 1<<16 - 1
	case abi >= 3: // TRUNCATE
		return 1<<15 - 1
	case abi == 2: // REFER
		return 1<<14 - 1
	case abi == 1:
		return 1<<13 - 1
	}
	return 0
}

// rulesetAttr is struct landlock_ruleset_attr up to ABI 6 (scoped).
type rulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// landlockABI returns the kernel's Landlock ABI version.
func landlockABI() (int, error) {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0, fmt.Errorf("landlock_create_ruleset(VERSION): %w", e)
	}
	return int(v), nil
}

type pathRule struct {
	list   string // "read_only", "read_write", "baseline read_only", "baseline read_write", "always"
	path   string
	access uint64
	// optional: a baseline path; missing, it is skipped without a word,
	// and refused (a link the workload could have made) it is skipped
	// with a warning in either mode.
	optional bool
}

// applyLandlock restricts the calling thread, and what it execs, to the
// rules, each path opened by res (never through a link the workload could
// have made); no_new_privs must be set. It returns the ABI (0 when
// Landlock is unavailable) and, in BestEffort mode, a warning per skipped
// path.
func applyLandlock(mode Mode, rules []pathRule, res *resolver) (int, []string, error) {
	abi, err := landlockABI()
	if err != nil {
		if mode == HardRequirement {
			return 0, nil, permanent(fmt.Errorf("landlock unavailable (hard_requirement): %w: this kernel cannot enforce the filesystem policy; use landlock.compatibility: best_effort, or a kernel with Landlock (5.13 or later)", err))
		}
		return 0, []string{fmt.Sprintf("landlock unavailable, filesystem policy not enforced: %v", err)}, nil
	}
	attr := rulesetAttr{handledAccessFS: handledFS(abi)}
	if abi >= 6 {
		// The workload may not signal init nor reach abstract unix sockets
		// outside its domain.
		attr.scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	size := unsafe.Sizeof(attr)
	if abi < 6 {
		size = unsafe.Offsetof(attr.scoped)
	}
	rfd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return abi, nil, fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	defer unix.Close(int(rfd))
	var warnings []string
	for _, r := range rules {
		err := addPathRule(int(rfd), res, r.path, r.access&attr.handledAccessFS)
		if err == nil || (r.optional && errors.Is(err, unix.ENOENT)) {
			continue
		}
		if mode == HardRequirement && errors.Is(err, unix.ENOENT) {
			return abi, nil, permanent(fmt.Errorf("filesystem_policy %s %s: %w (hard_requirement): the path does not exist in the sandbox; remove it from the policy, or use landlock.compatibility: best_effort", r.list, r.path, err))
		}
		refused := errors.Is(err, errWorkloadLink)
		if mode == HardRequirement && refused && !r.optional {
			// The workload's own doing: no retry heals it.
			return abi, nil, permanent(fmt.Errorf("filesystem_policy %s %s: %w (hard_requirement)", r.list, r.path, err))
		}
		if mode == HardRequirement && !refused {
			return abi, nil, fmt.Errorf("filesystem_policy %s %s: %w (hard_requirement)", r.list, r.path, err)
		}
		warnings = append(warnings, fmt.Sprintf("filesystem_policy %s %s skipped: %v", r.list, r.path, err))
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rfd, 0, 0); e != 0 {
		return abi, nil, fmt.Errorf("landlock_restrict_self: %w", e)
	}
	return abi, warnings, nil
}

// addPathRule allows access beneath path (only the file rights when path is
// not a directory), opened by res.
func addPathRule(rfd int, res *resolver, path string, access uint64) error {
	fd, err := res.open(path, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= accessFile
	}
	if access == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rfd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0); e != 0 {
		return fmt.Errorf("landlock_add_rule: %w", e)
	}
	return nil
}
