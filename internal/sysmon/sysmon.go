package sysmon

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// Setting is the GODEBUG entry this package adds: a schedtrace period the
// runtime will not reach for 24.8 days of uptime, set only for its side
// effect of keeping sysmon out of deep sleep.
const Setting = "schedtrace=2147483647"

const key = "GODEBUG="

// Env returns env with Setting added to its GODEBUG, and whether it added
// it. An env whose GODEBUG already names schedtrace is returned as it is:
// that is the operator's choice. The runtime reads the first GODEBUG entry
// of its environment; the result has exactly one.
func Env(env []string) ([]string, bool) {
	value, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key); ok {
			value, found = v, true
			break
		}
	}
	if found && names(value, "schedtrace") {
		return env, false
	}
	if value != "" {
		value += ","
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key) {
			out = append(out, kv)
		}
	}
	return append(out, key+value+Setting), true
}

// names reports whether a GODEBUG value sets name.
func names(godebug, name string) bool {
	for _, field := range strings.Split(godebug, ",") {
		if k, _, ok := strings.Cut(strings.TrimSpace(field), "="); ok && k == name {
			return true
		}
	}
	return false
}

// Reexec replaces this process (same pid, arguments and descriptors) with
// a fresh run of its own binary whose environment has Setting, unless the
// environment has it already or names schedtrace itself; then it returns
// nil at once. It returns only when there is nothing to do or the exec
// failed; the caller goes on either way (the setting is about speed).
// Call it before the process has started anything that an exec would cut
// short: listeners, child processes, open files meant to be flushed.
func Reexec() error {
	env, changed := Env(os.Environ())
	if !changed {
		return nil
	}
	// /proc/self/exe is this process's binary even when its path has been
	// replaced or removed since it started (an upgrade in place).
	if err := syscall.Exec("/proc/self/exe", os.Args, env); err != nil {
		return fmt.Errorf("sysmon: re-exec with GODEBUG=%s: %w", Setting, err)
	}
	return nil // not reached
}
