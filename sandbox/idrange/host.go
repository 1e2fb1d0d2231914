package idrange

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// HostFiles are the host's id databases a pool must stay clear of (a
// parameter, so tests stand in their own files).
type HostFiles struct {
	SubUID, SubGID string // name:start:count (shadow's subordinate ids)
	Passwd, Group  string // name:x:id:... (the ids of users and groups)
}

// DefaultHostFiles are /etc/subuid, /etc/subgid, /etc/passwd and
// /etc/group.
func DefaultHostFiles() HostFiles {
	return HostFiles{SubUID: "/etc/subuid", SubGID: "/etc/subgid", Passwd: "/etc/passwd", Group: "/etc/group"}
}

// CheckHost refuses a pool that overlaps a range of the subordinate id
// files or holds a user's uid or a group's gid: that host user would hold
// ids of sandboxes (signal and trace their processes, own their files,
// and own their user namespaces). A missing file has no ranges; a line
// of a subordinate id file that cannot be read is refused (what it grants
// is unknown). The error names the file, the line and the fix.
func CheckHost(pool Range, f HostFiles) error {
	fix := "give the gateway a --uid-pool clear of every range in /etc/subuid and /etc/subgid and of every uid and gid in /etc/passwd and /etc/group"
	for _, file := range []string{f.SubUID, f.SubGID} {
		err := eachLine(file, func(n int, line string) error {
			fields := strings.Split(line, ":")
			if len(fields) != 3 {
				return fmt.Errorf("uid pool %s: %s line %d (%q) is not NAME:START:COUNT; fix the line, or %s", pool, file, n, line, fix)
			}
			start, err1 := strconv.ParseUint(fields[1], 10, 32)
			count, err2 := strconv.ParseUint(fields[2], 10, 32)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("uid pool %s: %s line %d (%q) is not NAME:START:COUNT; fix the line, or %s", pool, file, n, line, fix)
			}
			if count == 0 {
				return nil
			}
			// A range reaching past 2^32 overlaps whatever lies above its start.
			r := Range{Base: uint32(start), Size: uint32(min(count, 1<<32-start))}
			if pool.Overlaps(r) {
				return fmt.Errorf("uid pool %s overlaps %s line %d (%q: %s holds ids %s); %s", pool, file, n, line, fields[0], r, fix)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, db := range []struct{ file, what string }{{f.Passwd, "user"}, {f.Group, "group"}} {
		err := eachLine(db.file, func(n int, line string) error {
			fields := strings.Split(line, ":")
			if len(fields) < 3 {
				return nil // not an entry (NIS "+" lines and the like)
			}
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err != nil || !pool.Contains(uint32(id)) {
				return nil
			}
			return fmt.Errorf("uid pool %s holds the id of %s %s (%s line %d: %d); %s", pool, db.what, fields[0], db.file, n, id, fix)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// eachLine calls f with each non-blank, non-comment line of file and its
// 1-based number; a missing file has none.
func eachLine(file string, f func(n int, line string) error) error {
	if file == "" {
		return nil
	}
	fh, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("uid pool: read %s: %w", file, err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := f(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("uid pool: read %s: %w", file, err)
	}
	return nil
}
