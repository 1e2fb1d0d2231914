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
// it. Where env has several GODEBUG entries the last counts, as it does
// for os/exec, which keeps the last of duplicates (an env built as
// append(os.Environ(), extra...)); the result has exactly one. A GODEBUG
// that already names schedtrace is kept as it is: the operator's choice.
func Env(env []string) ([]string, bool) {
	value := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key); ok {
			value = v
		}
	}
	changed := !names(value, "schedtrace")
	if changed {
		if value != "" {
			value += ","
		}
		value += Setting
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, key) {
			out = append(out, kv)
		}
	}
	if value != "" {
		out = append(out, key+value)
	}
	return out, changed
}

// names reports whether a GODEBUG value sets name. Like the runtime's own
// parser it takes each comma-separated field as it is (no trimming).
func names(godebug, name string) bool {
	for _, field := range strings.Split(godebug, ",") {
		if k, _, ok := strings.Cut(field, "="); ok && k == name {
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
// Call it first, before signal handlers, listeners, child processes or
// anything an exec would drop or cut short.
func Reexec() error {
	env, changed := Env(os.Environ())
	if !changed {
		return nil
	}
	if err := syscall.Exec(binary(), os.Args, env); err != nil {
		return fmt.Errorf("sysmon: re-exec with GODEBUG=%s: %w", Setting, err)
	}
	return nil // not reached
}

// binary is the path to exec this process's own binary through: its path
// when that still names the same file, so the process keeps its name
// (the kernel names a process after the file it execs), else
// /proc/self/exe, which is the running binary even when its path has been
// replaced or removed since it started (an upgrade in place).
func binary() string {
	const self = "/proc/self/exe"
	exe, err := os.Executable()
	if err != nil {
		return self
	}
	a, errA := os.Stat(exe)
	b, errB := os.Stat(self)
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		return self
	}
	return exe
}
