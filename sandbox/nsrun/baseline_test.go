package nsrun

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMergeBaseline(t *testing.T) {
	fs := Filesystem{
		BaselineReadOnly:  []string{"/usr", "/etc", "/proc", "/usr/", "/tmp"},
		BaselineReadWrite: []string{"/tmp", "/sandbox", "/dev/null"},
	}
	for _, tc := range []struct {
		name           string
		ro, rw         []string
		wantRO, wantRW []string
	}{
		{"no policy lists", nil, nil, []string{"/usr", "/etc", "/proc"}, []string{"/tmp", "/sandbox", "/dev/null"}},
		{"the policy's own access wins", []string{"/etc"}, []string{"/usr"}, []string{"/proc"}, []string{"/tmp", "/sandbox", "/dev/null"}},
		{"a read-only path beneath a baseline read-write one", []string{"/sandbox/ro"}, nil,
			[]string{"/usr", "/etc", "/proc"}, []string{"/tmp", "/dev/null"}},
		{"a read-only baseline path the policy makes read-write", nil, []string{"/tmp"}, []string{"/usr", "/etc", "/proc"}, []string{"/sandbox", "/dev/null"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro, rw := mergeBaseline(fs, tc.ro, tc.rw)
			if !slices.Equal(ro, tc.wantRO) || !slices.Equal(rw, tc.wantRW) {
				t.Fatalf("mergeBaseline = %q, %q; want %q, %q", ro, rw, tc.wantRO, tc.wantRW)
			}
		})
	}
}

func TestPrepareBaseline(t *testing.T) {
	s := Spec{Argv: []string{"/bin/sh"}, Workspace: t.TempDir(), ProxyLoopback: []string{"localhost"}, HostIDBase: testIDBase,
		Filesystem: Filesystem{BaselineReadOnly: []string{"/usr"}, BaselineReadWrite: []string{"/tmp"}}}
	cfg, _, err := s.prepare()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.BaselineReadOnly, []string{"/usr"}) || !slices.Equal(cfg.BaselineReadWrite, []string{"/tmp"}) {
		t.Fatalf("baseline %q %q", cfg.BaselineReadOnly, cfg.BaselineReadWrite)
	}
	if !slices.Contains(cfg.Env, "NO_PROXY=127.0.0.1") {
		t.Fatalf("env %q: want NO_PROXY=127.0.0.1 (localhost goes through the proxy)", cfg.Env)
	}
	rules := landlockRules(cfg)
	var optional []string
	for _, r := range rules {
		if r.optional {
			optional = append(optional, r.list+" "+r.path)
		}
	}
	if !slices.Equal(optional, []string{"baseline read_only /usr", "baseline read_write /tmp"}) {
		t.Fatalf("optional Landlock rules %q", optional)
	}
	s.Filesystem.BaselineReadOnly = []string{"usr"}
	if _, _, err := s.prepare(); err == nil || !strings.Contains(err.Error(), `"usr" is not absolute`) {
		t.Fatalf("a relative baseline path: %v", err)
	}
}

// TestExecFailure: which execve errors are permanent, and what they say.
func TestExecFailure(t *testing.T) {
	cfg := &stageConfig{ReadOnly: []string{"/usr"}, ReadWrite: []string{"/nonexistent-x"}}
	for _, tc := range []struct {
		path      string
		errno     error
		permanent bool
		want      string
	}{
		{"/no/such/bin", unix.ENOENT, true, "the command /no/such/bin does not exist in the sandbox: check the path (the sandbox sees "},
		{"/bin/sh", unix.ENOENT, true, "execve /bin/sh: no such file or directory: the file exists but its interpreter"},
		{"/bin/sh", unix.EACCES, true, "execve /bin/sh: permission denied: the policy's filesystem_policy does not allow executing it (list /bin, or a directory above it, in read_only)"},
		{"/w/x", unix.ENOEXEC, true, "execve /w/x: exec format error: it is not a program"},
		{"/w/x", unix.ENOMEM, false, "execve /w/x: cannot allocate memory"},
	} {
		err := execFailure(tc.path, tc.errno, cfg)
		if errors.Is(err, ErrCannotStart) != tc.permanent || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.errno) {
			t.Errorf("execFailure(%s, %v) = %v (permanent %v), want %q (permanent %v)", tc.path, tc.errno, err, errors.Is(err, ErrCannotStart), tc.want, tc.permanent)
		}
	}
	msg := execFailure("/no/such/bin", unix.ENOENT, cfg).Error()
	if !strings.Contains(msg, "/usr") || strings.Contains(msg, "/nonexistent-x") || !strings.Contains(msg, "/tmp") || !strings.Contains(msg, "/sandbox") {
		t.Errorf("the paths named are not what the sandbox sees: %s", msg)
	}
	// The mark survives the wire between stages.
	back := stageError(message{Kind: msgFailed, Error: msg, Permanent: true})
	if !errors.Is(back, ErrCannotStart) || back.Error() != msg {
		t.Errorf("stageError lost the mark or the text: %v", back)
	}
	if errors.Is(stageError(message{Kind: msgFailed, Error: "x"}), ErrCannotStart) {
		t.Error("an unmarked failure became permanent")
	}
}
