package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stockade-dev/stockade/errdefs"
	"github.com/stockade-dev/stockade/messages"
)

// run executes the root command in-process with args; it returns stdout,
// stderr and the exit code main would give (the error is printed on
// stderr as main prints it).
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.Execute()
	code := exitCodeOf(err)
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		code = exitUsage // main: a cobra error (flags, arguments) is a usage error
	}
	if err != nil {
		errb.WriteString("stockade: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), code
}

func TestUnknownCommandExits2WithSuggestion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"sandbox", "lss"}, `unknown command "lss" for "stockade sandbox"; did you mean list (alias ls)?`},
		{[]string{"sandbox", "rmm"}, `did you mean delete (alias rm)?`},
		{[]string{"policy", "chek"}, `unknown command "chek" for "stockade policy"; did you mean check?`},
		{[]string{"sandbx"}, `unknown command "sandbx" for "stockade"; did you mean sandbox?`},
		{[]string{"client", "isue"}, `did you mean issue?`},
		{[]string{"gateway", "rn"}, `did you mean run?`},
		{[]string{"completion", "bsh"}, `unknown command "bsh" for "stockade completion"`},
		{[]string{"help", "sandbox", "lss"}, `did you mean list (alias ls)?`},
		{[]string{"sandbox", "zzzz"}, `unknown command "zzzz" for "stockade sandbox" (stockade sandbox --help lists the commands)`},
	} {
		out, errOut, code := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
		if strings.Contains(out, "Usage:") {
			t.Errorf("%v: printed the help on an unknown command:\n%s", tc.args, out)
		}
	}
}

func TestGroupAloneShowsHelp(t *testing.T) {
	for _, args := range [][]string{{}, {"sandbox"}, {"policy"}, {"help", "sandbox"}} {
		out, errOut, code := run(t, args...)
		if code != 0 || !strings.Contains(out, "Available Commands:") {
			t.Errorf("%v: exit %d %q; want the help and exit 0:\n%s", args, code, errOut, out)
		}
	}
}

func TestAliases(t *testing.T) {
	root := newRootCmd()
	for alias, name := range map[string]string{"ls": "list", "rm": "delete"} {
		c, _, err := root.Find([]string{"sandbox", alias})
		if err != nil || c.Name() != name {
			t.Errorf("sandbox %s: %v %v, want %s", alias, c, err, name)
		}
	}
}

// TestHelpFlags: every command's help shows its bool flags plainly (pflag
// v1.1.0 prints --help[=true|false]) and has examples.
func TestHelpFlags(t *testing.T) {
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		if c.Hidden || c.Name() == cobra.ShellCompRequestCmd {
			return
		}
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Errorf("%v: exit %d %s", args, code, errOut)
		}
		if strings.Contains(out, "[=true|false]") {
			t.Errorf("%v shows [=true|false]:\n%s", args, out)
		}
		if !strings.Contains(out, "  -h, --help ") {
			t.Errorf("%v: no plain -h, --help line:\n%s", args, out)
		}
		if !strings.Contains(out, "Examples:") {
			t.Errorf("%v: no Examples", args)
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(newRootCmd())
	// Parsing is unchanged: --flag alone is true, --flag=false false.
	root := newRootCmd()
	del, _, _ := root.Find([]string{"sandbox", "delete"})
	if err := del.ParseFlags([]string{"--no-wait", "--all=false"}); err != nil {
		t.Fatal(err)
	}
	if nw, _ := del.Flags().GetBool("no-wait"); !nw {
		t.Error("--no-wait alone did not set it")
	}
	if all, _ := del.Flags().GetBool("all"); all {
		t.Error("--all=false set it")
	}
}

func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/stockade-dev/stockade", Version: "v0.0.0-20261130224907-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-30T22:49:07Z"}, {Key: "vcs.modified", Value: "true"}}}
	v := versionOf(bi)
	if want := "stockade v0.0.0-20261130224907-0123456789ab+dirty (commit 0123456789ab, 2026-11-30T22:49:07Z, modified) go1.26.0 " + v.Platform; v.line() != want {
		t.Errorf("line %q, want %q", v.line(), want)
	}
	b, _ := json.Marshal(v)
	var keys map[string]any
	_ = json.Unmarshal(b, &keys)
	for _, k := range []string{"version", "commit", "commitTime", "modified", "goVersion", "platform"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("version -o json lacks %q: %s", k, b)
		}
	}
	if got := versionOf(nil); got.Version != "unknown" || got.line() != "stockade unknown "+got.GoVersion+" "+got.Platform {
		t.Errorf("no build info: %+v %q", got, got.line())
	}

	// The commands print it (this test binary has no VCS stamp).
	out, _, code := run(t, "--version")
	if code != 0 || !strings.HasPrefix(out, "stockade ") || strings.Count(out, "\n") != 1 {
		t.Errorf("--version: exit %d %q, want one line", code, out)
	}
	out, _, code = run(t, "version", "-o", "json")
	var got versionView
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.GoVersion == "" || got.Version == "" {
		t.Errorf("version -o json: exit %d %v %q", code, err, out)
	}
	if _, errOut, code := run(t, "version", "-o", "xml"); code != exitUsage {
		t.Errorf("version -o xml: exit %d %q, want 2", code, errOut)
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{{0, "0s"}, {5 * time.Second, "5s"}, {59 * time.Second, "59s"}, {time.Minute, "1m"}, {3*time.Minute + 59*time.Second, "3m"},
		{2 * time.Hour, "2h"}, {23*time.Hour + 59*time.Minute, "23h"}, {4*24*time.Hour + time.Hour, "4d"}, {-3 * time.Second, "0s"}} {
		if got := age(now.Add(-tc.ago), now); got != tc.want {
			t.Errorf("age of %s: %q, want %q", tc.ago, got, tc.want)
		}
	}
	if got := ageMs(0, now); got != "-" {
		t.Errorf("age of no time: %q", got)
	}
}

// TestTimesFixedWidth: a time in a table or JSON always has three digits
// of milliseconds (RFC3339Nano would print 22:50:22.57Z).
func TestTimesFixedWidth(t *testing.T) {
	ms := time.Date(2026, 11, 30, 22, 50, 22, 570_000_000, time.UTC).UnixMilli()
	if got := msTime(ms); got != "2026-11-30T22:50:22.570Z" {
		t.Errorf("msTime: %q", got)
	}
	if got := msTime(ms - 570); got != "2026-11-30T22:50:22.000Z" {
		t.Errorf("msTime on the second: %q", got)
	}
	if msTime(0) != "" {
		t.Error("msTime(0) is not empty")
	}
}

func TestSortedKeys(t *testing.T) {
	m := map[string]int64{"session": 2, "relay": 0, "sandbox": 1, "boundary": 3}
	for range 20 { // map order is random: one wrong order shows within a few tries
		if got := countsText(m); got != "boundary=3 relay=0 sandbox=1 session=2" {
			t.Fatalf("countsText: %q", got)
		}
	}
	if countsText(nil) != "-" {
		t.Error("empty restarts are not -")
	}
	st := &messages.SandboxStatus{Name: "a", Phase: "Ready", Restarts: m, SinceUnixMs: time.Now().UnixMilli()}
	v := viewOf(st)
	var tab bytes.Buffer
	tw := tabwriter.NewWriter(&tab, 0, 4, 2, ' ', 0)
	statusTable(tw, v, time.Now())
	_ = tw.Flush()
	if !strings.Contains(tab.String(), "boundary=3 relay=0 sandbox=1 session=2") {
		t.Errorf("get table restarts not sorted:\n%s", tab.String())
	}
}

// TestStatusJSONOmitsEmpty: the one rule of docs/cli.md, on get -o json.
func TestStatusJSONOmitsEmpty(t *testing.T) {
	v := viewOf(&messages.SandboxStatus{Name: "a", Phase: "Stopped", SinceUnixMs: 1})
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	_ = json.Unmarshal(b, &keys)
	for _, k := range []string{"name", "phase", "since", "recoveryAttempts", "policyVersion", "restarts", "transitions"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("%s missing: %s", k, b)
		}
	}
	for _, k := range []string{"uid", "reason", "message", "nextRetry", "workspace", "supervisorPid", "workloadPid", "resources"} {
		if _, ok := keys[k]; ok {
			t.Errorf("empty %s present: %s", k, b)
		}
	}
	if strings.Contains(string(b), `""`) {
		t.Errorf("an empty string in %s", b)
	}
}

func TestListTableAge(t *testing.T) {
	now := time.Now()
	list := []*messages.SandboxStatus{
		{Name: "a", Phase: "Ready", SinceUnixMs: now.Add(-5 * time.Second).UnixMilli(), Restarts: map[string]int64{"session": 1, "sandbox": 2}},
		{Name: "bbbbbbbb", Phase: "Recovering", Reason: "StartFailed", SinceUnixMs: now.Add(-3 * time.Hour).UnixMilli()},
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	listTable(tw, list, now)
	_ = tw.Flush()
	want := "NAME      PHASE       REASON       AGE  RESTARTS\n" +
		"a         Ready       -            5s   3\n" +
		"bbbbbbbb  Recovering  StartFailed  3h   0\n"
	if b.String() != want {
		t.Errorf("list table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWorstExit(t *testing.T) {
	for _, tc := range []struct {
		codes []int
		want  int
	}{{nil, 0}, {[]int{0, 0}, 0}, {[]int{0, 3}, 3}, {[]int{3, 1}, 3}, {[]int{1, 5, 4}, 5}, {[]int{4, 3}, 4}} {
		if got := worstExit(tc.codes...); got != tc.want {
			t.Errorf("worstExit(%v) = %d, want %d", tc.codes, got, tc.want)
		}
	}
	nf := &exitError{errdefs.ExitCode(errdefs.KindNotFound), errdefs.NotFound("no sandbox named %q", "x")}
	if exitCodeOf(nf) != exitNotFound || exitCodeOf(nil) != 0 || exitCodeOf(errors.New("x")) != exitFailure {
		t.Error("exitCodeOf")
	}
}

func TestDeleteArgs(t *testing.T) {
	for _, args := range [][]string{{"sandbox", "delete"}, {"sandbox", "rm", "a", "--all"}} {
		if _, errOut, code := run(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d %q, want 2", args, code, errOut)
		}
	}
}

func TestWaitOutcome(t *testing.T) {
	for _, tc := range []struct {
		g     goal
		phase string
		done  bool
		fail  bool
	}{
		{goalReady, "Provisioning", false, false}, {goalReady, "Recovering", false, false}, {goalReady, "Ready", true, false},
		{goalReady, "Completed", true, false}, {goalReady, "Error", false, true}, {goalReady, "Stopped", false, true},
		{goalStopped, "Stopping", false, false}, {goalStopped, "Stopped", true, false}, {goalStopped, "Deleting", false, true},
		{goalGone, "Deleting", false, false},
	} {
		done, err := tc.g.outcome(&messages.SandboxStatus{Name: "a", Phase: tc.phase, Reason: "StartFailed", Message: "execve /no/such/bin"})
		if done != tc.done || (err != nil) != tc.fail {
			t.Errorf("%s in %s: done %v err %v", tc.g, tc.phase, done, err)
		}
		if err != nil && exitCodeOf(err) != exitFailure {
			t.Errorf("%s in %s: exit %d, want 1", tc.g, tc.phase, exitCodeOf(err))
		}
	}
	_, err := goalReady.outcome(&messages.SandboxStatus{Name: "a", Phase: "Error", Reason: "StartFailed", Message: "execve /no/such/bin"})
	if msg := err.Error(); !strings.Contains(msg, "Error/StartFailed: execve /no/such/bin") || !strings.Contains(msg, "stockade sandbox start a") ||
		!strings.Contains(msg, "stockade sandbox logs a") {
		t.Errorf("Error outcome says %q; want reason, message and what to do", msg)
	}
	st := &messages.SandboxStatus{Name: "demo", Phase: "Recovering", Reason: "StartFailed", RecoveryAttempts: 2, Message: "m"}
	if got := progressLine(st, 3100*time.Millisecond); got != "demo: Recovering/StartFailed (attempt 2 of 10, +3.1s): m" {
		t.Errorf("progress line %q", got)
	}
}

func TestWatchLines(t *testing.T) {
	var b bytes.Buffer
	w := &watcher{out: &b, seen: map[string]shown{}}
	at := time.Date(2026, 11, 30, 22, 50, 22, 0, time.Local)
	a := &messages.SandboxStatus{Name: "a", Phase: "Ready", Message: "running", SupervisorPid: 10, WorkloadPid: 12}
	w.observe(at, []*messages.SandboxStatus{a}, true)
	w.observe(at, []*messages.SandboxStatus{a}, true) // no change: no line
	counted := &messages.SandboxStatus{Name: "a", Phase: "Ready", Message: "running", SupervisorPid: 10, WorkloadPid: 12, RecoveryAttempts: 0}
	a.RecoveryAttempts = 3 // the attempt counter resets after a stable run: not shown, no line
	w.observe(at, []*messages.SandboxStatus{a}, true)
	w.observe(at, []*messages.SandboxStatus{counted}, true)
	a2 := &messages.SandboxStatus{Name: "a", Phase: "Stopping", Message: "stop requested", SupervisorPid: 10, WorkloadPid: 12}
	w.observe(at, []*messages.SandboxStatus{a2}, true)
	w.observe(at, nil, true) // gone
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines:\n%s", b.String())
	}
	for i, want := range []string{"22:50:22.000  a                 Ready         -                  10/12          running",
		"22:50:22.000  a                 Stopping      -                  10/12          stop requested",
		"22:50:22.000  a                 -             -                  -              deleted"} {
		if lines[i] != want {
			t.Errorf("line %d: %q, want %q", i, lines[i], want)
		}
	}
	if !strings.HasPrefix(watchHeader, "TIME          NAME              PHASE         REASON             PIDS           MESSAGE") {
		t.Error("header")
	}
}

func TestCompletion(t *testing.T) {
	out, _, code := run(t, "__complete", "sandbox", "get", "-o", "")
	if code != 0 || !strings.HasPrefix(out, "table\njson\nyaml\n") {
		t.Errorf("-o values: exit %d %q", code, out)
	}
	// No gateway: no names, quietly, and no file completion either.
	out, _, code = run(t, "__complete", "sandbox", "stop", "--gateway", "127.0.0.1:1", "--state-dir", t.TempDir(), "")
	if code != 0 || out != ":4\n" {
		t.Errorf("names without a gateway: exit %d %q, want :4 (no files) only", code, out)
	}
	out, _, code = run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "__start_stockade") {
		t.Errorf("completion bash: exit %d", code)
	}
}

// TestServeFlagValues: a bad --connect-records or --identity value is a
// usage error naming the values, found before anything is opened: the
// proxy address here is taken, and opening it first would fail otherwise.
func TestServeFlagValues(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	policy, hosts := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "hosts")
	if err := os.WriteFile(policy, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hosts, []byte("127.0.0.1 a.test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flag, value, want string }{
		{"--connect-records", "yes", `--connect-records "yes": want auto or off`},
		{"--identity", "pidfd", `--identity "pidfd": want netlink or none`},
	} {
		_, errOut, code := run(t, "boundary", "serve", "--policy", policy, "--hosts", hosts, "--dns", "127.0.0.1:0", "--proxy", taken.Addr().String(), tc.flag, tc.value)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %s: exit %d, stderr %q; want %d naming the values", tc.flag, tc.value, code, errOut, exitUsage)
		}
	}
}
