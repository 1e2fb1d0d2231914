package nsrun

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// pidsInNS returns the host pids whose /proc/<pid>/ns/pid link reads ns.
// It costs one readlink per host process (a few µs each); processes that
// exit during the walk are skipped.
func pidsInNS(ns string) ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("nsrun: pids: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("nsrun: pids: list /proc: %w", err)
	}
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if link, err := os.Readlink("/proc/" + name + "/ns/pid"); err == nil && link == ns {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// hostPid maps a pid as numbered inside the pid namespace ns to the host's
// numbering through the NSpid lines of /proc/<pid>/status; 0 if no
// process of ns has it (it exited).
func hostPid(ns string, inner int) int {
	pids, err := pidsInNS(ns)
	if err != nil {
		return 0
	}
	want := []byte(strconv.Itoa(inner))
	for _, pid := range pids {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for line := range bytes.Lines(status) {
			if rest, ok := bytes.CutPrefix(line, []byte("NSpid:")); ok {
				f := bytes.Fields(rest)
				if len(f) > 1 && bytes.Equal(f[len(f)-1], want) {
					return pid
				}
				break
			}
		}
	}
	return 0
}
