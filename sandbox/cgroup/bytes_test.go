package cgroup

import "testing"

func TestBytes(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "2G": 2 << 30, "2GiB": 2 << 30, "1.5g": 3 << 29, "4096": 4096, "64kb": 64 << 10} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1G", "2X"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) took it", bad)
		}
	}
	for n, want := range map[int64]string{2 << 30: "2 GiB", 512 << 20: "512 MiB", 3 << 29: "1.5 GiB", 0: "none", 100: "100 B"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
