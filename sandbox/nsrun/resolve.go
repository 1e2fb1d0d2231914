package nsrun

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Paths the sandbox gets from its configuration (Landlock rules, bind
// sources, mount points) are opened component by component with
// O_PATH|O_NOFOLLOW: a symbolic link is followed only when it lies in a
// directory the workload cannot write (/lib -> usr/lib on a merged-/usr
// system, /var/run -> /run: root's links, outside the workload's reach).
// A link in a directory it can write (the workspace, the private tmpfs
// mounts, the policy's read_write paths, all of which outlive a start or
// an Exec) could have been planted to redirect the path at the next start,
// so the path is refused (errWorkloadLink) instead of followed.

// errWorkloadLink is wrapped by a refusal to follow a link the workload
// could have made.
var errWorkloadLink = errors.New("symbolic link in a directory the workload can write")

// maxLinks bounds the links one resolution follows (the kernel's 40).
const maxLinks = 40

// workloadLinkError names the refused link and the path being resolved.
type workloadLinkError struct{ path, link, dir string }

func (e *workloadLinkError) Error() string {
	if e.link == e.path {
		return fmt.Sprintf("%s is a %s (%s): not followed; make it a real directory or file, or list the link's target instead", e.path, errWorkloadLink, e.dir)
	}
	return fmt.Sprintf("%s crosses %s, a %s (%s): not followed; list the link's target instead", e.path, e.link, errWorkloadLink, e.dir)
}

func (e *workloadLinkError) Unwrap() error { return errWorkloadLink }

// resolver opens paths beneath root (a directory descriptor: "/" for the
// host before the pivot or for the sandbox after it, the staging root for
// mount points) without following links in writable directories.
type resolver struct {
	root int
	// writable holds clean absolute paths, as seen from root, beneath
	// which the workload can create or rename entries.
	writable []string
}

// newResolver returns a resolver beneath root whose writable directories
// are writable (clean, absolute) and what each of them resolves to: a
// writable path named through a trusted link (/var/run/x) is writable where
// the link leads (/run/x) too.
func newResolver(root int, writable []string) *resolver {
	r := &resolver{root: root}
	for _, w := range writable {
		r.writable = append(r.writable, filepath.Clean(w))
	}
	for _, w := range slices.Clone(r.writable) {
		fd, canon, err := r.resolve(w, true)
		if err == nil {
			unix.Close(fd)
			if !slices.Contains(r.writable, canon) {
				r.writable = append(r.writable, canon)
			}
		}
	}
	return r
}

// canWrite reports whether the workload can make or replace entries in
// directory dir (its resolved path).
func (r *resolver) canWrite(dir string) bool {
	for _, w := range r.writable {
		if dir == w || strings.HasPrefix(dir, w+"/") || w == "/" {
			return true
		}
	}
	return false
}

// open returns an O_PATH descriptor of path beneath the root. A final
// link is followed (like open(2)) when followFinal is set, else opened
// itself (like O_NOFOLLOW). An absolute link target starts again at the
// root; ".." never leaves it.
func (r *resolver) open(path string, followFinal bool) (int, error) {
	fd, _, err := r.resolve(path, followFinal)
	return fd, err
}

// step is one directory on the way: its descriptor and name.
type step struct {
	fd   int
	name string
}

// resolve is open that also returns the resolved path.
func (r *resolver) resolve(path string, followFinal bool) (int, string, error) {
	if !filepath.IsAbs(path) {
		return -1, "", fmt.Errorf("%s: not an absolute path", path)
	}
	var stack []step // beneath the root; ".." pops, so it goes back the way it came
	defer func() {
		for _, s := range stack {
			unix.Close(s.fd)
		}
	}()
	cur := func() int {
		if len(stack) == 0 {
			return r.root
		}
		return stack[len(stack)-1].fd
	}
	here := func() string {
		p := "/"
		for _, s := range stack {
			p = filepath.Join(p, s.name)
		}
		return p
	}
	todo := components(path)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case ".":
			continue
		case "..":
			if n := len(stack); n > 0 {
				unix.Close(stack[n-1].fd)
				stack = stack[:n-1]
			}
			continue
		}
		fd, err := unix.Openat(cur(), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if at := filepath.Join(here(), c); at != filepath.Clean(path) {
				return -1, "", fmt.Errorf("open %s: %w", at, err)
			}
			return -1, "", fmt.Errorf("open: %w", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, "", fmt.Errorf("fstat %s: %w", filepath.Join(here(), c), err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK || (len(todo) == 0 && !followFinal) {
			stack = append(stack, step{fd: fd, name: c})
			continue
		}
		dir := here()
		if r.canWrite(dir) {
			unix.Close(fd)
			return -1, "", &workloadLinkError{path: path, link: filepath.Join(dir, c), dir: dir}
		}
		if links++; links > maxLinks {
			unix.Close(fd)
			return -1, "", fmt.Errorf("open %s: %w", path, unix.ELOOP)
		}
		target, err := readlinkFD(fd)
		unix.Close(fd)
		if err != nil {
			return -1, "", fmt.Errorf("readlink %s: %w", filepath.Join(dir, c), err)
		}
		if strings.HasPrefix(target, "/") {
			for _, s := range stack {
				unix.Close(s.fd)
			}
			stack = nil
		}
		todo = append(components(target), todo...)
	}
	final := here()
	if len(stack) == 0 {
		fd, err := unix.Openat(r.root, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, "", fmt.Errorf("open /: %w", err)
		}
		return fd, final, nil
	}
	fd := stack[len(stack)-1].fd
	stack = stack[:len(stack)-1]
	return fd, final, nil
}

// components splits a path into its names ("" and "." left out).
func components(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// readlinkFD reads the link an O_PATH|O_NOFOLLOW descriptor holds.
func readlinkFD(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// openRoot opens dir as the root of a resolver.
func openRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", dir, err)
	}
	return fd, nil
}

// writablePaths are the directories, as seen inside, in which the workload
// can make entries that outlive a start or last through an Exec: the
// workspace, the private tmpfs mounts and the read-write lists (with the
// baseline's). Without Landlock the sandbox's root could write more
// (its own /dev), but then no rule is added at all.
func writablePaths(cfg *stageConfig) []string {
	out := []string{WorkspaceMount, "/tmp", "/var/tmp", "/dev/shm", "/run"}
	out = append(out, cfg.ReadWrite...)
	return append(out, cfg.BaselineReadWrite...)
}
