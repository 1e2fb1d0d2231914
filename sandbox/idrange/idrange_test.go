package idrange

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAndCheckPool(t *testing.T) {
	p, err := Parse(DefaultPool().String())
	if err != nil || p != DefaultPool() {
		t.Fatalf("Parse(%s) = %v, %v", DefaultPool(), p, err)
	}
	if got := DefaultPool().String(); got != "1879048192-2147352575" {
		t.Errorf("DefaultPool = %s", got)
	}
	if n := DefaultPool().slots(); n != 4094 {
		t.Errorf("the default pool holds %d ranges, want 4094", n)
	}
	if err := CheckPool(DefaultPool()); err != nil {
		t.Errorf("the default pool: %v", err)
	}
	for _, s := range []string{"", "5", "10-5", "a-b", "1-2-3", "-1-5"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	for _, tc := range []struct{ pool, want string }{
		{"100000-165535", "boundaries"},               // Debian's first subuid range: not aligned
		{"0-65535", "start at 65536"},                 // host users
		{"65536-131071", ""},                          // one range: fine
		{"2147418112-2147549183", "below 2147483648"}, // crosses 2^31
		{"131072-131072", "at least one range"},
	} {
		p, err := Parse(tc.pool)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckPool(p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckPool(%s): %v", tc.pool, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckPool(%s) = %v, want an error saying %q", tc.pool, err, tc.want)
		}
	}
}

func TestRangeOf(t *testing.T) {
	pool := Range{Base: 4 * Size, Size: 4 * Size}
	for _, tc := range []struct {
		id   uint32
		want Range
		ok   bool
	}{
		{100000, Legacy(), true},
		{165535, Legacy(), true},
		{4*Size + 5, Range{4 * Size, Size}, true},
		{7*Size + Size - 1, Range{7 * Size, Size}, true},
		{8 * Size, Range{}, false},
		{0, Range{}, false},
		{1000, Range{}, false},
	} {
		if got, ok := pool.RangeOf(tc.id); got != tc.want || ok != tc.ok {
			t.Errorf("RangeOf(%d) = %v %v, want %v %v", tc.id, got, ok, tc.want, tc.ok)
		}
	}
	if err := CheckShiftSource(Range{Base: 0, Size: Size}, Range{Base: 4 * Size, Size: Size}); !errors.Is(err, ErrNotARange) {
		t.Errorf("shifting from the host's 16-bit ids: %v", err)
	}
	if err := CheckShiftSource(Range{Base: 4 * Size, Size: 2 * Size}, Range{Base: 8 * Size, Size: Size}); !errors.Is(err, ErrNotARange) {
		t.Errorf("shifting from a double range: %v", err)
	}
	if err := CheckShiftSource(Legacy(), Range{Base: 4 * Size, Size: Size}); err != nil {
		t.Errorf("shifting from the legacy range: %v", err)
	}
}

// hostFiles writes stand-ins for the four files.
func hostFiles(t *testing.T, subuid, subgid, passwd, group string) HostFiles {
	dir := t.TempDir()
	f := HostFiles{SubUID: filepath.Join(dir, "subuid"), SubGID: filepath.Join(dir, "subgid"),
		Passwd: filepath.Join(dir, "passwd"), Group: filepath.Join(dir, "group")}
	for p, s := range map[string]string{f.SubUID: subuid, f.SubGID: subgid, f.Passwd: passwd, f.Group: group} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestCheckHost(t *testing.T) {
	debian := "# comment\nalice:100000:65536\nbob:165536:65536\n"
	passwd := "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/:/usr/sbin/nologin\n+::::::\n"
	group := "root:x:0:\n"
	if err := CheckHost(DefaultPool(), hostFiles(t, debian, debian, passwd, group)); err != nil {
		t.Errorf("the default pool against Debian's subordinate ranges: %v", err)
	}
	if err := CheckHost(DefaultPool(), HostFiles{SubUID: "/nonexistent/subuid"}); err != nil {
		t.Errorf("a missing file: %v", err)
	}
	pool := Range{Base: 3 * Size, Size: 2 * Size} // 196608-327679 holds part of bob's 165536-231071
	for _, tc := range []struct {
		name  string
		files HostFiles
		want  []string
	}{
		{"subuid", hostFiles(t, debian, "", "", ""), []string{"subuid line 3", "bob", "165536-231071", "--uid-pool"}},
		{"subgid", hostFiles(t, "", "carol:200000:10\n", "", ""), []string{"subgid line 1", "carol", "200000-200009"}},
		{"passwd", hostFiles(t, "", "", "svc:x:1000:1::/:/bin/false\nsvc2:x:300000:1::/:/bin/false\n", ""), []string{"passwd line 2", "user svc2", "300000"}},
		{"group", hostFiles(t, "", "", "", "grp:x:327679:\n"), []string{"group line 1", "group grp", "327679"}},
		{"unreadable line", hostFiles(t, "dave:lots:65536\n", "", "", ""), []string{"subuid line 1", "NAME:START:COUNT"}},
		{"range reaching 2^32", hostFiles(t, "eve:4294967295:100\n", "", "", ""), nil},
	} {
		err := CheckHost(pool, tc.files)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: pool %s accepted", tc.name, pool)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}
