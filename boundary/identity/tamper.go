package identity

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Tampered processes. A policy's binaries name programs, and the kernel
// says which program a process runs (its exe). That vouches for the code
// the process runs only if nothing else was loaded into it: a library
// preloaded (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, ...) or any
// executable mapping of a file the workload could have written runs
// code the policy never named inside the allowed process, and so does a
// tracer (ptrace), which can make the process do anything. Tampered
// judges the processes of an identity: every executable mapping must be
// the program's own file, anonymous memory (code the process made
// itself: a JIT), a kernel's pseudo mapping ([vdso]), or a file under a
// read-only path of the sandbox and under none of its writable ones; and
// no process may be traced. The verdict on the mappings is kept for the
// exec it was made on (Exec), so a client's next connections cost no
// read of its maps.

// TamperPolicy says what Tampered judges (WithTamperCheck). Paths are as
// the workload's processes see them (the sandbox's view), as
// /proc/PID/maps names the files they map.
type TamperPolicy struct {
	// ReadOnly are the paths the workload may read but not write: a file
	// mapped executable is vouched for only beneath one of them.
	ReadOnly []string
	// Writable are the paths the workload may write (or that hold what
	// another process wrote: a workspace, a tmpfs): a file beneath one of
	// them is never vouched for, even beneath a ReadOnly path.
	Writable []string
	// TracerEveryCall reads each process's tracer at every call, for a
	// workload that may ptrace its own processes; otherwise the tracer is
	// read with the mappings, once per exec (only processes outside the
	// sandbox can attach later).
	TracerEveryCall bool
}

// tamperCheck is a TamperPolicy with its paths cleaned.
type tamperCheck struct {
	readOnly, writable []string
	tracerEveryCall    bool
}

// WithTamperCheck makes Tampered judge the processes of an identity by
// p (without it, Tampered finds nothing).
func WithTamperCheck(p TamperPolicy) Option {
	clean := func(ps []string) []string {
		out := make([]string, 0, len(ps))
		for _, x := range ps {
			if filepath.IsAbs(x) {
				out = append(out, filepath.Clean(x))
			}
		}
		return out
	}
	return func(c *config) {
		c.tamper = &tamperCheck{readOnly: clean(p.ReadOnly), writable: clean(p.Writable), tracerEveryCall: p.TracerEveryCall}
	}
}

// Tampering is a process of a connection that runs code the policy
// cannot vouch for.
type Tampering struct {
	Pid int
	Exe string
	Why string
}

// Inspector is a Resolver that can tell whether the processes of an
// identity run only code the workload could not have written.
type Inspector interface {
	// Tampered returns the first process of id (the owner, then each
	// holder) that is traced or maps executable code from a file the
	// workload could have written, or nil when none does. An error means
	// it cannot tell (the identity is unavailable).
	Tampered(id Identity) (*Tampering, error)
}

var _ Inspector = (*Netlink)(nil)

// Tampered implements Inspector.
func (r *Netlink) Tampered(id Identity) (*Tampering, error) {
	if r.tamper == nil {
		return nil, nil
	}
	var one [1]Holder
	for _, p := range processesOf(id, &one) {
		var why string
		err := r.proc.withHandle(p.Pid, func(h *procHandle) error {
			start, err := r.proc.t.start(h)
			if err != nil {
				return err
			}
			e, err := r.proc.t.exec(h)
			if err != nil {
				return err
			}
			if start != p.Start || (p.Exec.Known() && !sameExec(e, p.Exec)) {
				return fmt.Errorf("pid %d is no longer the process identified: %w", p.Pid, errOwnerGone)
			}
			why, err = r.judge(h, e)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("identity: inspect pid %d (%s): %w", p.Pid, p.Exe, err)
		}
		if why != "" {
			return &Tampering{Pid: p.Pid, Exe: p.Exe, Why: why}, nil
		}
	}
	return nil, nil
}

// judge returns why h's process, running e, is tampered ("": it is not):
// its tracer, then its mappings, as kept for e or read now.
func (r *Netlink) judge(h *procHandle, e Exec) (string, error) {
	if r.tamper.tracerEveryCall {
		if why, err := h.traced(); why != "" || err != nil {
			return why, err
		}
	}
	t := r.proc.t
	t.mu.Lock()
	why, ok, epoch := h.tamperWhy, h.hasTamper && h.tamperFor == e, h.epoch
	t.mu.Unlock()
	if ok {
		return why, nil
	}
	if !r.tamper.tracerEveryCall {
		var err error
		if why, err = h.traced(); err != nil {
			return "", err
		}
	}
	if why == "" {
		maps, err := h.maps()
		if err != nil {
			return "", err
		}
		why = r.tamper.judgeMaps(maps, e)
	}
	t.mu.Lock()
	if h.epoch == epoch {
		h.tamperWhy, h.tamperFor, h.hasTamper = why, e, true
	}
	t.mu.Unlock()
	return why, nil
}

// traced returns why h's process is traced ("": it is not): the
// TracerPid of its status, read through a descriptor held for it.
func (h *procHandle) traced() (string, error) {
	fd, err := h.held(&h.status, "status")
	if err != nil {
		return "", err
	}
	var buf [4096]byte
	n, err := unix.Pread(fd, buf[:], 0)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errExited
	}
	tracer, err := parseTracerPid(buf[:n])
	if err != nil || tracer == 0 {
		return "", err
	}
	return fmt.Sprintf("traced by pid %d (ptrace lets another process act through it)", tracer), nil
}

// parseTracerPid returns the TracerPid line's value of a status file.
func parseTracerPid(b []byte) (int, error) {
	const key = "\nTracerPid:"
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("status without TracerPid: %w", errMalformedStat)
	}
	rest := b[i+len(key):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	n, ok := atoiBytes(bytes.TrimSpace(rest))
	if !ok {
		return 0, fmt.Errorf("TracerPid %q: %w", string(rest), errMalformedStat) // a copy: b stays on its caller's stack
	}
	return n, nil
}

// maps reads h's process's /proc/PID/maps whole.
func (h *procHandle) maps() ([]byte, error) {
	fd, err := unix.Openat(h.dir, "maps", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 16<<10)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// judgeMaps returns why the executable mappings of a process running e
// are not vouched for ("": they are), from its maps lines ("start-end
// perms offset major:minor inode path").
func (c *tamperCheck) judgeMaps(maps []byte, e Exec) string {
	for len(maps) > 0 {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		if why := c.judgeMapping(line, e); why != "" {
			return why
		}
	}
	return ""
}

// judgeMapping judges one maps line ("" when vouched for or not
// executable).
func (c *tamperCheck) judgeMapping(line []byte, e Exec) string {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		f[i], rest = rest[:j], rest[j:]
	}
	if len(f[1]) < 3 || f[1][2] != 'x' {
		return "" // not executable
	}
	path := string(bytes.TrimLeft(rest, " "))
	switch {
	case path == "":
		return "" // anonymous: code the process made itself (a JIT)
	case strings.HasPrefix(path, "["):
		return "" // [vdso], [vsyscall], [uprobes]: the kernel's
	case path == "/dev/zero (deleted)":
		return "" // shared anonymous memory
	case isFile(f[3], f[4], e):
		return "" // the program itself: the policy names it
	case strings.HasPrefix(path, "/memfd:"):
		return fmt.Sprintf("maps executable code from a memory file (%s): code the workload wrote", path)
	case strings.HasPrefix(path, "/SYSV"):
		return fmt.Sprintf("maps executable code from System V shared memory (%s): code another process may write", path)
	case !strings.HasPrefix(path, "/"):
		return fmt.Sprintf("maps executable code from %s, no file of the sandbox's view", path)
	}
	p := strings.TrimSuffix(path, " (deleted)")
	if under(p, c.writable) {
		return fmt.Sprintf("maps executable code from %s, a path the workload can write", path)
	}
	if !under(p, c.readOnly) {
		return fmt.Sprintf("maps executable code from %s, outside the sandbox's read-only paths", path)
	}
	return ""
}

// isFile reports whether a maps line's device ("major:minor" in hex) and
// inode name e's executable.
func isFile(dev, inode []byte, e Exec) bool {
	maj, min, ok := bytes.Cut(dev, []byte(":"))
	if !ok || !e.Known() {
		return false
	}
	ma, err1 := strconv.ParseUint(string(maj), 16, 32)
	mi, err2 := strconv.ParseUint(string(min), 16, 32)
	ino, err3 := strconv.ParseUint(string(inode), 10, 64)
	return err1 == nil && err2 == nil && err3 == nil && unix.Mkdev(uint32(ma), uint32(mi)) == e.Dev && ino == e.Ino
}

// under reports whether p is one of roots or beneath one.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || r == "/" || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}
