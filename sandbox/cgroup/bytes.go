package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// FormatBytes writes n in binary units ("2 GiB", "512 MiB"); n <= 0 is
// "none".
func FormatBytes(n int64) string {
	if n <= 0 {
		return "none"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// ParseBytes reads a size: a number with an optional unit K, M, G, T (or
// KB/KiB, MB/MiB, ...: all binary), e.g. "512M", "2G", "2GiB", "1073741824".
func ParseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		case 'T':
			mult, t = 1<<40, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional K, M, G or T (binary units), e.g. 512M or 2G", s)
	}
	return int64(v * float64(mult)), nil
}
