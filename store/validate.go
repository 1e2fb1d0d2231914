package store

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/stockade-dev/stockade/actors/sandbox/lifecycle"
	"github.com/stockade-dev/stockade/contract"
)

// maxPid bounds a pid read from a record (the kernel's PID_MAX_LIMIT): a
// negative or huge one is never a process of ours, and a negative one
// handed to kill(2) would name a process group.
const maxPid = 4 << 20

// localAddress is protoactor's address of an actor system without a remote
// endpoint (in-process supervisors of the sandbox actor's tests).
const localAddress = "nonhost"

// Validate checks a record read from a store (bbolt or etcd) the way a
// create checks what a client asks, and the fields only the gateway
// writes: whoever can write the store (a local user with the state file or
// etcd's keys) must not be able to make the gateway act on a name that is
// a path, a pid that is a process group or a phase that does not exist.
// key is the name the record was stored under ("" when there is none): it
// must be the record's own name.
func (r Record) Validate(key string) error {
	name := r.Spec.Name
	if key != "" && key != name {
		return fmt.Errorf("stored under %q but names sandbox %q", key, name)
	}
	if err := r.Spec.Validate(); err != nil {
		return err
	}
	if _, err := r.Intent.MarshalText(); err != nil {
		return err
	}
	// The enums decode by name (an unknown one fails to decode); a
	// missing phase decodes as PhaseNone, which no record has.
	if !slices.Contains(lifecycle.Phases(), r.Lifecycle.Phase) {
		return fmt.Errorf("lifecycle phase %s is not a phase of a sandbox", r.Lifecycle.Phase)
	}
	for _, pid := range []int{r.SupervisorPID, r.WorkloadPID} {
		if pid < 0 || pid > maxPid {
			return fmt.Errorf("pid %d is not a process id", pid)
		}
	}
	if r.InstanceID != "" && !isToken(r.InstanceID, 64) {
		return fmt.Errorf("instance id %q: want up to 64 letters, digits, '-' and '_'", r.InstanceID)
	}
	if r.SupervisorAddr != "" && r.SupervisorAddr != localAddress {
		if err := CheckAddr(r.SupervisorAddr); err != nil {
			return fmt.Errorf("supervisor address: %w", err)
		}
	}
	if r.Host != "" {
		if err := contract.CheckHostName("host", r.Host); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a sandbox's spec: its name and uid as paths may use
// them, its restart policy and its limits as create accepts them.
func (s Spec) Validate() error {
	if err := contract.CheckName(s.Name); err != nil {
		return err
	}
	if s.UID != "" {
		if err := contract.CheckUID(s.UID); err != nil {
			return err
		}
	}
	if _, err := s.Restart.MarshalText(); err != nil {
		return err
	}
	if err := s.Limits.Validate(); err != nil {
		return err
	}
	if strings.ContainsRune(s.Workdir, 0) {
		return errors.New("workdir holds a NUL byte")
	}
	for _, a := range s.Argv {
		if strings.ContainsRune(a, 0) {
			return errors.New("a command argument holds a NUL byte")
		}
	}
	return nil
}

// MinLogBytes is the smallest log cap a sandbox may ask for: each of the
// log's four files then holds at least 64 KiB, more than its longest
// line (the supervisor cuts lines at 16 KiB).
const MinLogBytes = 256 << 10

// Validate checks limits as create accepts them: positive values (at least
// 8 pids and 16 MiB of memory, a log of at least MinLogBytes), 0 for the
// default or -1 for none (no "none" for the log's burst).
func (l Limits) Validate() error {
	if l.Pids < -1 || l.MemoryBytes < -1 || l.CPUs < -1 || l.IOBps < -1 || l.LogBytes < -1 || l.LogLinesPerSec < -1 ||
		(l.MemoryBytes > 0 && l.MemoryBytes < 16<<20) || (l.Pids > 0 && l.Pids < 8) {
		return fmt.Errorf("limits %+v: use positive values (at least 8 pids and 16 MiB of memory), 0 for the default or -1 for none", l)
	}
	if l.LogBytes > 0 && l.LogBytes < MinLogBytes {
		return fmt.Errorf("log size %d bytes: use at least %d (256K), 0 for the default or -1 for none", l.LogBytes, MinLogBytes)
	}
	if l.LogBurst < 0 {
		return fmt.Errorf("log burst %d lines: use a positive number of lines, or 0 for the default", l.LogBurst)
	}
	return nil
}

// CheckAddr validates a host:port address read from a store: an IP or a
// host name, and a port in 1-65535.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", addr, port)
	}
	if net.ParseIP(host) == nil && contract.CheckHostName("host", host) != nil {
		return fmt.Errorf("%q: %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// isToken reports whether s is 1 to max letters, digits, '-' and '_'.
func isToken(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
