package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotEnforced is wrapped by New when no group can be made here.
var ErrNotEnforced = errors.New("limits not enforced")

// Limits of one sandbox. Zero fields are not limited.
type Limits struct {
	Pids        int64
	MemoryBytes int64 // memory and swap together
	CPUs        float64
	// IOBps caps reads and writes (bytes per second, each) on IODevice,
	// a block device "MAJOR:MINOR" (the workspace's disk).
	IOBps    int64
	IODevice string
}

// Usage of one sandbox's group.
type Usage struct {
	MemoryBytes int64
	Pids        int64
	CPU         time.Duration
	// OOMKills counts the processes the kernel killed for memory.
	OOMKills int64
	// IOBytes counts the bytes read and written on block devices.
	IOBytes int64
}

// Group is one sandbox's control group.
type Group interface {
	// Add moves a process (and so everything it starts later) in.
	Add(pid int) error
	Usage() (Usage, error)
	// Procs lists the processes in the group.
	Procs() ([]int, error)
	// Remove deletes the group (its processes must be gone).
	Remove() error
	// Version is "v1" or "v2".
	Version() string
}

// Root is where the cgroup file systems are mounted.
const Root = "/sys/fs/cgroup"

// New makes (or reuses) the group name under this process's own groups and
// sets l on it.
func New(name string, l Limits) (Group, error) {
	return newAt(Root, "/proc/self/cgroup", name, l)
}

func newAt(root, self, name string, l Limits) (Group, error) {
	own, err := ownGroups(self)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEnforced, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return newV2(filepath.Join(root, own[""], name), l)
	}
	return newV1(root, own, name, l)
}

// CPUGroupOf reads a /proc/PID/cgroup file and returns the process's cpu
// group: the v1 cpu controller's where it has one, else its v2 group.
func CPUGroupOf(procCgroup string) (string, error) {
	own, err := ownGroups(procCgroup)
	if err != nil {
		return "", err
	}
	if p, ok := own["cpu"]; ok {
		return p, nil
	}
	return own[""], nil
}

// ownGroups reads /proc/self/cgroup: controller -> path ("" for v2).
func ownGroups(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read own cgroups: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup: write %s to %s: %w", strings.TrimSpace(value), path, err)
	}
	return nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %s: %w", path, err)
	}
	return v, nil
}

// keyed reads one "key value" line of a flat-keyed file (memory.events,
// memory.oom_control, cpu.stat).
func keyed(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("cgroup: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: %s %s: %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

// mkdir makes a group directory; EACCES/EPERM/EROFS mean not delegated.
func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS) {
			return fmt.Errorf("%w: no delegated cgroup (%v)", ErrNotEnforced, err)
		}
		return fmt.Errorf("%w: %v", ErrNotEnforced, err)
	}
	return nil
}

// v1 is a group in each controller's hierarchy.
type v1 struct{ dirs map[string]string }

func newV1(root string, own map[string]string, name string, l Limits) (Group, error) {
	g := &v1{dirs: map[string]string{}}
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "blkio"} {
		mount := filepath.Join(root, c)
		if _, err := os.Stat(mount); err != nil {
			if c == "blkio" && l.IOBps <= 0 {
				continue // io is neither limited nor measured there
			}
			g.remove()
			return nil, fmt.Errorf("%w: cgroup v1 controller %s is not mounted at %s", ErrNotEnforced, c, mount)
		}
		dir := filepath.Join(mount, own[c], name)
		if err := mkdir(dir); err != nil {
			g.remove()
			return nil, err
		}
		g.dirs[c] = dir
	}
	var errs []error
	if l.MemoryBytes > 0 {
		m := g.dirs["memory"]
		errs = append(errs, write(filepath.Join(m, "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)))
		if _, err := os.Stat(filepath.Join(m, "memory.memsw.limit_in_bytes")); err == nil {
			errs = append(errs, write(filepath.Join(m, "memory.memsw.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)))
		}
	}
	if l.Pids > 0 {
		errs = append(errs, write(filepath.Join(g.dirs["pids"], "pids.max"), strconv.FormatInt(l.Pids, 10)))
	}
	if l.CPUs > 0 {
		const period = 100000
		errs = append(errs, write(filepath.Join(g.dirs["cpu"], "cpu.cfs_period_us"), strconv.Itoa(period)),
			write(filepath.Join(g.dirs["cpu"], "cpu.cfs_quota_us"), strconv.FormatInt(int64(l.CPUs*period), 10)))
	}
	if l.IOBps > 0 && l.IODevice != "" {
		v := l.IODevice + " " + strconv.FormatInt(l.IOBps, 10)
		errs = append(errs, write(filepath.Join(g.dirs["blkio"], "blkio.throttle.read_bps_device"), v),
			write(filepath.Join(g.dirs["blkio"], "blkio.throttle.write_bps_device"), v))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *v1) Version() string { return "v1" }

func (g *v1) Add(pid int) error {
	for _, dir := range g.dirs {
		if err := write(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

func (g *v1) Usage() (Usage, error) {
	var u Usage
	var errs []error
	var err error
	u.MemoryBytes, err = readInt(filepath.Join(g.dirs["memory"], "memory.usage_in_bytes"))
	errs = append(errs, err)
	u.Pids, err = readInt(filepath.Join(g.dirs["pids"], "pids.current"))
	errs = append(errs, err)
	ns, err := readInt(filepath.Join(g.dirs["cpuacct"], "cpuacct.usage"))
	errs = append(errs, err)
	u.CPU = time.Duration(ns)
	u.OOMKills, err = keyed(filepath.Join(g.dirs["memory"], "memory.oom_control"), "oom_kill")
	errs = append(errs, err)
	if b := g.dirs["blkio"]; b != "" {
		u.IOBytes, _ = keyed(filepath.Join(b, "blkio.throttle.io_service_bytes_recursive"), "Total")
	}
	return u, errors.Join(errs...)
}

func (g *v1) Procs() ([]int, error) { return procs(filepath.Join(g.dirs["pids"], "cgroup.procs")) }

func (g *v1) Remove() error { return g.remove() }

func (g *v1) remove() error {
	var errs []error
	for _, dir := range g.dirs {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// v2 is a group in the unified hierarchy.
type v2 struct{ dir string }

func newV2(dir string, l Limits) (Group, error) {
	parent := filepath.Dir(dir)
	// The parent must hand the controllers down (it may refuse when it
	// holds processes itself: the v2 "no internal processes" rule).
	if err := write(filepath.Join(parent, "cgroup.subtree_control"), "+memory +pids +cpu +io"); err != nil {
		return nil, fmt.Errorf("%w: enable controllers in %s: %v", ErrNotEnforced, parent, err)
	}
	if err := mkdir(dir); err != nil {
		return nil, err
	}
	g := &v2{dir: dir}
	var errs []error
	if l.MemoryBytes > 0 {
		errs = append(errs, write(filepath.Join(dir, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)))
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			errs = append(errs, write(filepath.Join(dir, "memory.swap.max"), "0"))
		}
	}
	if l.Pids > 0 {
		errs = append(errs, write(filepath.Join(dir, "pids.max"), strconv.FormatInt(l.Pids, 10)))
	}
	if l.CPUs > 0 {
		const period = 100000
		errs = append(errs, write(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", int64(l.CPUs*period), period)))
	}
	if l.IOBps > 0 && l.IODevice != "" {
		errs = append(errs, write(filepath.Join(dir, "io.max"), fmt.Sprintf("%s rbps=%d wbps=%d", l.IODevice, l.IOBps, l.IOBps)))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *v2) Version() string { return "v2" }

func (g *v2) Add(pid int) error {
	return write(filepath.Join(g.dir, "cgroup.procs"), strconv.Itoa(pid))
}

func (g *v2) Usage() (Usage, error) {
	var u Usage
	var errs []error
	var err error
	u.MemoryBytes, err = readInt(filepath.Join(g.dir, "memory.current"))
	errs = append(errs, err)
	u.Pids, err = readInt(filepath.Join(g.dir, "pids.current"))
	errs = append(errs, err)
	us, err := keyed(filepath.Join(g.dir, "cpu.stat"), "usage_usec")
	errs = append(errs, err)
	u.CPU = time.Duration(us) * time.Microsecond
	u.OOMKills, err = keyed(filepath.Join(g.dir, "memory.events"), "oom_kill")
	errs = append(errs, err)
	u.IOBytes = ioStatBytes(filepath.Join(g.dir, "io.stat"))
	return u, errors.Join(errs...)
}

func (g *v2) Procs() ([]int, error) { return procs(filepath.Join(g.dir, "cgroup.procs")) }

func (g *v2) Remove() error {
	if err := unix.Rmdir(g.dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("cgroup: remove %s: %w", g.dir, err)
	}
	return nil
}

func procs(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// ioStatBytes sums rbytes and wbytes of every device in a v2 io.stat.
func ioStatBytes(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n int64
	for _, f := range strings.Fields(string(b)) {
		for _, k := range []string{"rbytes=", "wbytes="} {
			if v, ok := strings.CutPrefix(f, k); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// BlockDevice returns "MAJOR:MINOR" of the disk holding path (the whole
// disk when path's device is a partition), for Limits.IODevice; an error
// when path is not on a block device (tmpfs, overlay, a network fs).
func BlockDevice(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("cgroup: %w", err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := filepath.Join("/sys/dev/block", dev)
	if _, err := os.Stat(sys); err != nil {
		return "", fmt.Errorf("cgroup: %s is not on a block device (%s)", path, dev)
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		b, err := os.ReadFile(filepath.Join(sys, "..", "dev"))
		if err != nil {
			return "", fmt.Errorf("cgroup: the disk of partition %s: %w", dev, err)
		}
		dev = strings.TrimSpace(string(b))
	}
	return dev, nil
}
