package cgroup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// SandboxGroup is the name of the group of sandbox name whose directory
// (the gateway's STATE/sandboxes/NAME) is dir: the name says which sandbox,
// the hash which gateway's (two gateways may each have a sandbox "a").
func SandboxGroup(name, dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "stockade-" + name + "-" + hex.EncodeToString(sum[:4])
}

// RemoveNamed removes the group name under this process's own groups, in
// every hierarchy that has it, once its processes are gone, waiting up to
// wait for them to go. The supervisor calls it on its way out; one that
// was killed leaves its group behind, and the gateway calls it when it
// deletes the sandbox (a group costs the kernel memory for as long as it
// exists, empty or not). A group that is not there is not an error.
func RemoveNamed(name string, wait time.Duration) error {
	return removeNamedAt(Root, "/proc/self/cgroup", name, wait)
}

// Find lists the directories of the group name under this process's own
// groups, one per hierarchy that has it (none: the group does not exist).
func Find(name string) ([]string, error) { return findAt(Root, "/proc/self/cgroup", name) }

func findAt(root, self, name string) ([]string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: %q is not a group name", name)
	}
	own, err := ownGroups(self)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for ctrl, path := range own {
		mount := root
		if ctrl != "" {
			mount = filepath.Join(root, ctrl)
		}
		dir := filepath.Join(mount, path, name)
		if _, err := os.Stat(dir); err == nil {
			dirs = append(dirs, dir)
		}
	}
	sort.Strings(dirs)
	return dirs, nil
}

func removeNamedAt(root, self, name string, wait time.Duration) error {
	dirs, err := findAt(root, self, name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		var errs []error
		left := dirs[:0]
		for _, dir := range dirs {
			if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", dir, err))
				left = append(left, dir)
			}
		}
		dirs = left
		if len(errs) == 0 || !time.Now().Before(deadline) {
			return errors.Join(errs...)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
