package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procRSS returns a process's resident set size in bytes (VmRSS of
// /proc/<pid>/status: every thread's, shared pages counted).
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read rss: %w", err)
	}
	n, err := parseVmRSS(b)
	if err != nil {
		return 0, fmt.Errorf("read rss of %d: %w", pid, err)
	}
	return n, nil
}

// parseVmRSS reads the "VmRSS:  43808 kB" line of a /proc/<pid>/status.
func parseVmRSS(status []byte) (int64, error) {
	n, err := parseKB(status, "VmRSS:")
	if err != nil {
		return 0, fmt.Errorf("%w (a kernel thread or a zombie has none)", err)
	}
	return n, nil
}

// procAnon returns a process's anonymous memory in bytes (Anonymous of
// /proc/<pid>/smaps_rollup: its heap and stacks, what another copy of it
// adds; the rest of its RSS is the binary's and libraries' pages, which
// every process running the same binary shares).
func procAnon(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, fmt.Errorf("read anonymous memory: %w", err)
	}
	n, err := parseKB(b, "Anonymous:")
	if err != nil {
		return 0, fmt.Errorf("read anonymous memory of %d: %w", pid, err)
	}
	return n, nil
}

// parseKB reads the value of the first "field  N kB" line of text, in
// bytes.
func parseKB(text []byte, field string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		val, ok := strings.CutPrefix(sc.Text(), field)
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("malformed %s line %q", field, sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("malformed %s line %q", field, sc.Text())
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s line", field)
}

// procFDs counts a process's open file descriptors.
func procFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, fmt.Errorf("count fds: %w", err)
	}
	return len(ents), nil
}

// fmtBytes formats a size in MiB (KiB under 1 MiB), 1 decimal.
func fmtBytes(n float64) string {
	switch {
	case n >= 1<<20 || n <= -(1<<20):
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
}
