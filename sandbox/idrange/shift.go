package idrange

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ShiftStats counts what Shift saw and changed.
type ShiftStats struct {
	// Files walked (dir included), Moved: those whose owner or group
	// changed, OtherFS: entries on another filesystem, left alone.
	Files, Moved, OtherFS int
}

// maxShiftDepth bounds the walk (one descriptor per level).
const maxShiftDepth = 512

// Shift moves every file under dir (dir included) whose uid or gid lies
// in one of from into to, by offset (id - from.Base + to.Base); other ids
// are left as they are. It never follows a link: it walks by descriptors
// (openat with O_NOFOLLOW|O_DIRECTORY, fstatat and fchownat with
// AT_SYMLINK_NOFOLLOW), stays on dir's filesystem, restores the setuid and
// setgid bits chown clears, and moves dir itself last. When dir's own uid
// and gid already lie in to the shift is complete (one that stopped
// half-way left dir unmoved), and nothing is walked. Only the owner and
// group move: a file capability (chown removes it) or a POSIX ACL entry
// naming an id is not rewritten.
func Shift(dir string, from []Range, to Range) (ShiftStats, error) {
	var st ShiftStats
	if to.Size != Size {
		return st, fmt.Errorf("shift %s: the target %s is not a sandbox's range", dir, to)
	}
	for _, f := range from {
		if err := CheckShiftSource(f, to); err != nil {
			return st, fmt.Errorf("shift %s: %w", dir, err)
		}
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("shift %s: %w", dir, err)
	}
	defer unix.Close(root)
	var rst unix.Stat_t
	if err := unix.Fstat(root, &rst); err != nil {
		return st, fmt.Errorf("shift %s: %w", dir, err)
	}
	if len(from) == 0 || to.Contains(rst.Uid) && to.Contains(rst.Gid) {
		return st, nil
	}
	s := &shifter{from: from, to: to, dev: rst.Dev, stats: &st}
	if err := s.walk(root, dir, 0); err != nil {
		return st, err
	}
	st.Files++
	if uid, gid, ok := s.shifted(rst); ok {
		if err := unix.Fchownat(root, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return st, fmt.Errorf("shift %s: chown: %w", dir, err)
		}
		st.Moved++
	}
	return st, nil
}

type shifter struct {
	from  []Range
	to    Range
	dev   uint64
	stats *ShiftStats
}

// shifted returns the new uid and gid of a file (-1: unchanged) and
// whether either changes.
func (s *shifter) shifted(st unix.Stat_t) (int, int, bool) {
	move := func(id uint32) int {
		for _, f := range s.from {
			if f.Contains(id) {
				return int(id - f.Base + s.to.Base)
			}
		}
		return -1
	}
	uid, gid := move(st.Uid), move(st.Gid)
	return uid, gid, uid >= 0 || gid >= 0
}

// walk shifts the entries of the directory dirfd (at path, for errors),
// each subdirectory's content before the subdirectory itself.
func (s *shifter) walk(dirfd int, path string, depth int) error {
	if depth >= maxShiftDepth {
		return fmt.Errorf("shift: %s is nested deeper than %d directories", path, maxShiftDepth)
	}
	dup, err := unix.FcntlInt(uintptr(dirfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("shift %s: %w", path, err)
	}
	d := os.NewFile(uintptr(dup), path)
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if err := s.entry(dirfd, filepath.Join(path, name), name, depth); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("shift %s: read directory: %w", path, err)
		}
	}
}

func (s *shifter) entry(dirfd int, path, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("shift %s: %w", path, err)
	}
	if st.Dev != s.dev {
		s.stats.OtherFS++
		return nil
	}
	s.stats.Files++
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("shift %s: %w", path, err)
		}
		err = s.walk(sub, path, depth+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	uid, gid, ok := s.shifted(st)
	if !ok {
		return nil
	}
	s.stats.Moved++
	if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// chown clears these bits: set them again on the same file.
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("shift %s: %w", path, err)
		}
		defer unix.Close(fd)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("shift %s: chown: %w", path, err)
		}
		if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
			return fmt.Errorf("shift %s: chmod: %w", path, err)
		}
		return nil
	}
	if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("shift %s: chown: %w", path, err)
	}
	return nil
}
