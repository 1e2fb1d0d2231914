package nsrun

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes a directory tree under a temp dir: a key ending in "/" is a
// directory, "-> target" a symlink, anything else a file with that text.
func tree(t *testing.T, entries map[string]string) string {
	t.Helper()
	top := t.TempDir()
	for name, v := range entries {
		p := filepath.Join(top, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(strings.TrimPrefix(v, "-> "), p)
		default:
			err = os.WriteFile(p, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return top
}

// sameFile reports whether descriptor fd is the file at host path p
// (not following a final link).
func sameFile(t *testing.T, fd int, p string) bool {
	t.Helper()
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(p, &b); err != nil {
		t.Fatal(err)
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// TestResolver: links in directories the workload cannot write are
// followed as the kernel would (beneath the resolver's root); a link in a
// writable directory, crossed or final, is refused with an error naming
// the path and the link.
func TestResolver(t *testing.T) {
	top := tree(t, map[string]string{
		"usr/lib/libc.so":     "libc",
		"lib":                 "-> usr/lib",
		"abs":                 "-> /usr/lib",
		"etc/passwd":          "root",
		"var/run":             "-> /run",
		"run/app/":            "",
		"run/app/sock":        "-> /etc",
		"sandbox/real/":       "",
		"sandbox/cache":       "-> /etc",
		"sandbox/deep/x/":     "",
		"sandbox/deep/x/up":   "-> ../../../etc",
		"srv/shared/out":      "-> /etc",
		"srv/shared/kept/":    "",
		"loop1":               "-> loop2",
		"loop2":               "-> loop1",
		"escape":              "-> ../../../../../../..",
		"ws/keep":             "file",
		"sandbox/resolv-link": "-> /nonexistent",
	})
	root, err := openRoot(top)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	r := newResolver(root, []string{"/sandbox", "/tmp", "/var/run/app", "/srv/shared/kept"})

	for _, tc := range []struct {
		path   string
		follow bool
		want   string // the host file (beneath top) the descriptor must be
		canon  string
	}{
		{"/lib/libc.so", true, "usr/lib/libc.so", "/usr/lib/libc.so"},
		{"/lib", true, "usr/lib", "/usr/lib"},
		{"/lib", false, "lib", "/lib"},                                // a final link opened itself
		{"/abs/libc.so", true, "usr/lib/libc.so", "/usr/lib/libc.so"}, // absolute: from the root, not the host's /
		{"/lib/..", true, "usr", "/usr"},                              // ".." goes back the way it came
		{"/../../etc/passwd", true, "etc/passwd", "/etc/passwd"},      // never above the root
		{"/escape/etc", true, "etc", "/etc"},
		{"/sandbox/real", true, "sandbox/real", "/sandbox/real"},
		{"/sandbox/cache", false, "sandbox/cache", "/sandbox/cache"}, // the link itself: not followed
		{"/sandbox/resolv-link", false, "sandbox/resolv-link", "/sandbox/resolv-link"},
		{"/srv/shared/out", true, "etc", "/etc"}, // /srv/shared itself is not writable, only kept/
		{"/", true, "", "/"},
	} {
		fd, canon, err := r.resolve(tc.path, tc.follow)
		if err != nil {
			t.Errorf("resolve(%s, follow %v): %v", tc.path, tc.follow, err)
			continue
		}
		if !sameFile(t, fd, filepath.Join(top, tc.want)) || canon != tc.canon {
			t.Errorf("resolve(%s, follow %v) = %s, want %s (%s beneath the root)", tc.path, tc.follow, canon, tc.canon, tc.want)
		}
		unix.Close(fd)
	}

	for _, tc := range []struct {
		path, link string
	}{
		{"/sandbox/cache", "/sandbox/cache"},                // a final link in the workspace
		{"/sandbox/cache/passwd", "/sandbox/cache"},         // crossed
		{"/sandbox/deep/x/up/passwd", "/sandbox/deep/x/up"}, // beneath a writable dir, relative
		{"/var/run/app/sock", "/run/app/sock"},              // writable as named through /var/run
	} {
		fd, err := r.open(tc.path, true)
		if err == nil {
			unix.Close(fd)
			t.Errorf("open(%s) followed a link the workload could have made", tc.path)
			continue
		}
		if !errors.Is(err, errWorkloadLink) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.link) {
			t.Errorf("open(%s): %v; want errWorkloadLink naming %s and %s", tc.path, err, tc.path, tc.link)
		}
	}

	if _, err := r.open("/loop1", true); !errors.Is(err, unix.ELOOP) {
		t.Errorf("a link loop: %v, want ELOOP", err)
	}
	if _, err := r.open("/nonexistent", true); !errors.Is(err, unix.ENOENT) || err.Error() != "open: no such file or directory" {
		t.Errorf("a missing path: %v, want ENOENT said as open's", err)
	}
	if _, err := r.open("/nonexistent/below", true); !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "/nonexistent:") {
		t.Errorf("a missing parent: %v, want ENOENT naming /nonexistent", err)
	}
	if _, err := r.open("relative", true); err == nil {
		t.Error("a relative path was opened")
	}

	// A policy that makes all of / writable trusts no link at all.
	all := newResolver(root, []string{"/"})
	if fd, err := all.open("/lib/libc.so", true); !errors.Is(err, errWorkloadLink) {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("/lib with / writable: %v, want errWorkloadLink", err)
	}
}

// TestResolverHoldsWhatItChecked: the descriptor is the directory as it
// was checked; renaming a link into its place afterwards changes nothing
// for its holder.
func TestResolverHoldsWhatItChecked(t *testing.T) {
	top := tree(t, map[string]string{"sandbox/cache/": "", "etc/passwd": "root"})
	root, err := openRoot(top)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	r := newResolver(root, []string{"/sandbox"})
	fd, err := r.open("/sandbox/cache", true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var before unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(top, "sandbox/cache"), filepath.Join(top, "sandbox/moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(top, "sandbox/cache")); err != nil {
		t.Fatal(err)
	}
	if !sameFile(t, fd, filepath.Join(top, "sandbox/moved")) {
		t.Error("the descriptor changed with the name")
	}
	if _, err := r.open("/sandbox/cache", true); !errors.Is(err, errWorkloadLink) {
		t.Errorf("the planted link: %v, want errWorkloadLink", err)
	}
}

// TestBindAttr: a bind the workload can write in (a read-write path, one
// above or beneath it) is nosuid,nodev; a read-only system bind keeps the
// host's flags.
func TestBindAttr(t *testing.T) {
	cfg := &stageConfig{ReadWrite: []string{"/srv/data", "/home/u/proj/"}, BaselineReadWrite: []string{"/dev/null"}}
	for p, want := range map[string]uint64{
		"/srv/data": noSuidDevAttr, "/srv": noSuidDevAttr, "/home": noSuidDevAttr, "/home/u/proj": noSuidDevAttr,
		"/usr": 0, "/etc": 0, "/srv/database": 0, "/dev": noSuidDevAttr,
	} {
		if got := bindAttr(cfg, p); got != want {
			t.Errorf("bindAttr(%s) = %#x, want %#x", p, got, want)
		}
	}
	if got := bindAttr(&stageConfig{ReadWrite: []string{"/"}}, "/usr"); got != noSuidDevAttr {
		t.Errorf("bindAttr(/usr) with / read-write = %#x, want nosuid,nodev", got)
	}
}
