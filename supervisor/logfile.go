package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/stockade-dev/stockade/internal/logfile"
	"github.com/stockade-dev/stockade/logs"
)

// logKeep is how many rotated files the workload's log keeps
// (workload.log.1, the newest, to workload.log.3): the cap is shared by
// them and the live file, a quarter each.
const logKeep = 3

// logFile is the workload's log on disk: the live file and its rotated
// files, at most max bytes together. Each file starts with
// logs.WorkloadHeader; the live file is rotated before an entry would take
// it past a quarter of max, and the oldest rotated file is then removed.
// It is not safe for concurrent use (workloadLog holds its lock).
type logFile struct {
	path    string
	max     int64 // 0: no cap (never rotated for size)
	fileMax int64 // max/(logKeep+1): the live file's share
	f       io.WriteCloser
	size    int64          // of the live file
	olds    [logKeep]int64 // sizes of path.1 .. path.logKeep (0: none)
}

// openLogFile opens the log at path for appending, creating it. A live
// file of an earlier supervisor (not in logs.WorkloadHeader's form) is
// rotated first, so that no file mixes two forms. Files over the cap (an
// earlier supervisor's, a larger cap's) are removed, oldest first.
func openLogFile(path string, max int64) (*logFile, error) {
	lf := &logFile{path: path, max: max}
	if max > 0 {
		lf.fileMax = max / (logKeep + 1)
	}
	lf.statOlds()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = lf.create()
	case err != nil:
		err = fmt.Errorf("supervisor: workload log: %w", err)
	default:
		var st os.FileInfo
		if st, err = f.Stat(); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("supervisor: workload log: %w", err)
		}
		var head [len(logs.WorkloadHeader)]byte
		n, _ := f.ReadAt(head[:], 0)
		switch {
		case string(head[:n]) == logs.WorkloadHeader:
			lf.f, lf.size = f, st.Size()
		case st.Size() == 0: // made by an earlier supervisor, nothing in it
			_ = f.Close()
			err = lf.create()
		default:
			_ = f.Close()
			lf.size = st.Size()
			err = lf.rotate()
		}
	}
	if err != nil {
		return nil, err
	}
	lf.trim()
	return lf, nil
}

// old is the path of rotated file i (1: the newest).
func (lf *logFile) old(i int) string { return lf.path + "." + strconv.Itoa(i) }

// bytes is what the log takes on disk: the live file and the rotated ones.
func (lf *logFile) bytes() int64 {
	n := lf.size
	for _, s := range lf.olds {
		n += s
	}
	return n
}

// fits reports whether n more bytes after pending (buffered, not yet
// written) stay within the live file's share; an entry alone in a new
// file always fits (it cannot be split).
func (lf *logFile) fits(pending, n int) bool {
	used := lf.size + int64(pending)
	return lf.fileMax <= 0 || used+int64(n) <= lf.fileMax || used <= int64(len(logs.WorkloadHeader))
}

// write writes p (whole entries) in one write(2).
func (lf *logFile) write(p []byte) error {
	if lf.f == nil {
		return fmt.Errorf("supervisor: workload log %s is not open (its last rotation failed)", lf.path)
	}
	n, err := lf.f.Write(p)
	lf.size += int64(n)
	if err != nil {
		return fmt.Errorf("supervisor: write workload log %s: %w (is the disk full?)", lf.path, err)
	}
	return nil
}

// rotate moves the live file to path.1 (and each path.i to path.i+1, the
// last one replaced: logfile.Shift, as for every rotated log) and starts a
// new live file. On failure the log is
// closed: the caller tries again later (a new live file is made whatever
// state the rename left).
func (lf *logFile) rotate() error {
	if lf.f != nil {
		_ = lf.f.Close()
		lf.f = nil
	}
	err := logfile.Shift(lf.path, logKeep)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	lf.statOlds()
	if err != nil {
		return fmt.Errorf("supervisor: rotate workload log %s: %w", lf.path, err)
	}
	return lf.create()
}

// create makes a new live file holding the header, in place at once (a
// reader never sees it without its header).
func (lf *logFile) create() error {
	tmp := lf.path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("supervisor: workload log: %w", err)
	}
	if _, err := f.WriteString(logs.WorkloadHeader); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("supervisor: workload log %s: %w (is the disk full?)", tmp, err)
	}
	if err := os.Rename(tmp, lf.path); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("supervisor: workload log: %w", err)
	}
	lf.f, lf.size = f, int64(len(logs.WorkloadHeader))
	return nil
}

// statOlds reads the rotated files' sizes.
func (lf *logFile) statOlds() {
	for i := range lf.olds {
		lf.olds[i] = 0
		if st, err := os.Stat(lf.old(i + 1)); err == nil {
			lf.olds[i] = st.Size()
		}
	}
}

// trim removes rotated files, oldest first, while the log is over its cap.
func (lf *logFile) trim() {
	for i := logKeep; i >= 1 && lf.max > 0 && lf.bytes() > lf.max; i-- {
		if lf.olds[i-1] > 0 && os.Remove(lf.old(i)) == nil {
			lf.olds[i-1] = 0
		}
	}
}

func (lf *logFile) close() error {
	if lf.f == nil {
		return nil
	}
	err := lf.f.Close()
	lf.f = nil
	return err
}
