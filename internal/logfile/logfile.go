// Package logfile owns log files rotated by size: FILE, then FILE.1 (the
// newest rotated) to FILE.N. The audit file (package audit) and a
// supervisor's own log (RotatingFile) rotate the same way.
package logfile

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// RotatingFile is a log file rotated by size: when a write would take it
// over maxBytes, FILE becomes FILE.1 (FILE.1 becomes FILE.2, and so on up
// to FILE.keep; the oldest is dropped) and a new FILE is opened. Each write
// is one write(2) to a file opened for appending.
//
// The descriptors it follows (a process's stdout and stderr, 1 and 2) are
// made the current file when it opens and at each rotation (dup3): what
// the process writes there past the logger (the Go runtime's crash
// report, a last line on the way out) lands in the current file, not in
// one rotated away.
type RotatingFile struct {
	mu       sync.Mutex
	path     string
	f        *os.File
	size     int64
	maxBytes int64
	keep     int
	follow   []int
}

// OpenRotating opens (appending) or creates the log file at path (mode
// 0600), rotated at maxBytes keeping keep rotated files, and makes each
// descriptor of follow the file.
func OpenRotating(path string, maxBytes int64, keep int, follow ...int) (*RotatingFile, error) {
	if maxBytes <= 0 || keep < 0 {
		return nil, fmt.Errorf("logfile %s: rotate at %d bytes keeping %d files: the size must be positive, the count not negative", path, maxBytes, keep)
	}
	r := &RotatingFile{path: path, maxBytes: maxBytes, keep: keep, follow: follow}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// open opens the file at path as the current one and points the followed
// descriptors at it.
func (r *RotatingFile) open() error {
	f, size, err := OpenAppend(r.path)
	if err != nil {
		return err
	}
	for _, fd := range r.follow {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			_ = f.Close()
			return fmt.Errorf("logfile: point descriptor %d at %s: %w", fd, r.path, err)
		}
	}
	r.f, r.size = f, size
	return nil
}

// OpenAppend opens (for appending) or creates the file at path, mode 0600,
// and returns its size.
func OpenAppend(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return f, st.Size(), nil
}

// Write implements io.Writer: p is appended in one write(2), to a new file
// when it would take the current one over the size (a p larger than the
// size gets a file of its own). The size is the file's (fstat), what the
// followed descriptors wrote included.
func (r *RotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, fmt.Errorf("logfile %s: %w", r.path, os.ErrClosed)
	}
	// The followed descriptors write to the file too, past this count.
	if st, err := r.f.Stat(); err == nil {
		r.size = st.Size()
	}
	if r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotateLocked(); err != nil {
			// Keep writing to the file there is: a log line is better
			// late in a large file than lost.
			n, werr := r.f.Write(p)
			r.size += int64(n)
			return n, errors.Join(err, werr)
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotateLocked moves the current file to FILE.1 (shifting the older ones)
// and opens a new one; on failure the old file stays current.
func (r *RotatingFile) rotateLocked() error {
	if err := Shift(r.path, r.keep); err != nil {
		return err
	}
	old := r.f
	if err := r.open(); err != nil {
		return err
	}
	return old.Close()
}

// Shift moves a log file out of the way of a new one: FILE.(keep-1) to
// FILE.keep (replacing the oldest), ..., FILE to FILE.1; with keep 0, FILE
// is truncated instead. A rename that fails (other than for a file that
// is not there) stops it, so no rotated file is overwritten by a younger
// one: the caller keeps writing where it was.
func Shift(path string, keep int) error {
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", path, i), fmt.Sprintf("%s.%d", path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", path, err)
		}
	}
	if keep > 0 {
		if err := os.Rename(path, path+".1"); err != nil {
			return fmt.Errorf("rotate %s: %w", path, err)
		}
		return nil
	}
	if err := os.Truncate(path, 0); err != nil {
		return fmt.Errorf("truncate %s: %w", path, err)
	}
	return nil
}

// Close closes the current file (the followed descriptors stay open on it).
func (r *RotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
