package trust

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// CheckKeyFile refuses a private key file that is accessible by group or
// others (mode & 0o077 != 0) or owned by a uid other than [os.Geteuid], as
// sshd does. The error names the file, its mode or owner, and the fix. A
// missing file gives an error wrapping [io/fs.ErrNotExist].
func CheckKeyFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("private key %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("private key %s is not a regular file (mode %s)", path, fi.Mode())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		what := "accessible"
		if perm&0o044 != 0 {
			what = "readable"
		}
		return fmt.Errorf("private key %s is %s by others (mode %04o): run chmod 600 %s", path, what, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if euid := os.Geteuid(); int64(st.Uid) != int64(euid) {
			return fmt.Errorf("private key %s is owned by uid %d, not by this process (uid %d): run chown %d %s",
				path, st.Uid, euid, euid, path)
		}
	}
	return nil
}

// WriteFileAtomic writes data to path with mode perm: it writes a temporary
// file in the same directory (with mode perm from the start), syncs it and
// renames it over path, then syncs the directory. Readers see either the old
// content or the new, never a partial file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600; set perm before any data is written.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	// Make the rename durable; a directory that cannot be synced is not an
	// error worth failing a completed write for.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
