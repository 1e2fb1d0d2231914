package identity

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// exitWatcher records the exits a drain applies.
type exitWatcher struct{ exits []int }

func (w *exitWatcher) forked(int, int) {}
func (w *exitWatcher) exited(pid int)  { w.exits = append(w.exits, pid) }
func (w *exitWatcher) lost()           {}

// A marked sync drains when no drain has begun since the mark, so it
// applies every event queued before the mark; when one has, it does not
// drain again (the lookup of a connection accepted before that drain
// began needs nothing more).
func TestSyncMark(t *testing.T) {
	ev, p := eventsTable(t, eventsQueueBytes)
	r := &Netlink{proc: p}
	ev.sync(p.t, nil, nil)
	truePath := lookPath(t, "true")
	run := func() int {
		cmd := exec.Command(truePath)
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		return cmd.Process.Pid // its exit event is queued before Run returns
	}

	// An exit queued before the mark, no drain since: the marked sync
	// drains and applies it.
	pid := run()
	m := r.Mark()
	w := &exitWatcher{}
	ev.sync(p.t, w, &m)
	if got := ev.drains.Load(); got != m.drains+1 {
		t.Fatalf("marked sync with no drain since the mark: drains %d, want %d", got, m.drains+1)
	}
	if !slices.Contains(w.exits, pid) {
		t.Fatalf("marked sync did not apply the exit of %d, queued before the mark (applied %v)", pid, w.exits)
	}

	// A drain begun since the mark: the marked sync reads nothing more,
	// even with events queued since.
	m = r.Mark()
	pid = run()
	w = &exitWatcher{}
	ev.sync(p.t, w, nil)
	if !slices.Contains(w.exits, pid) {
		t.Fatalf("unmarked sync did not apply the exit of %d (applied %v)", pid, w.exits)
	}
	after := ev.drains.Load()
	run()
	w = &exitWatcher{}
	ev.sync(p.t, w, &m)
	if got := ev.drains.Load(); got != after || len(w.exits) != 0 {
		t.Fatalf("marked sync after a drain begun since the mark: drains %d (want %d), applied %v (want none)", got, after, w.exits)
	}
	// Without a mark, the same sync drains.
	ev.sync(p.t, w, nil)
	if got := ev.drains.Load(); got != after+1 || len(w.exits) == 0 {
		t.Fatalf("unmarked sync: drains %d (want %d), applied %v", got, after+1, w.exits)
	}
}

// TestForkedLastIsThePidCursor: a drain keeps the pid of the last fork it
// applied, the cursor a lookup orders a socket's holders by, so the
// events spare a read of /proc/loadavg per lookup; a child started now
// sorts before this process by it, across a pid wrap-around too.
func TestForkedLastIsThePidCursor(t *testing.T) {
	ev, p := eventsTable(t, eventsQueueBytes)
	ev.sync(p.t, nil, nil)
	cmd := exec.Command(lookPath(t, "true"))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	ev.sync(p.t, nil, nil)
	last := int(ev.forkedLast.Load())
	if last == 0 {
		t.Fatal("no fork seen after a child was started")
	}
	pids := []int{os.Getpid(), cmd.Process.Pid}
	newestFirst(pids, last)
	if pids[0] != cmd.Process.Pid {
		t.Fatalf("by the events' cursor %d: %v, want the child %d first", last, pids, cmd.Process.Pid)
	}
}

// TestStaleForkCursorFallsBack: a candidate above the events' cursor (a
// process forked since the last drain) is not taken for one allocated
// before a wrap-around: the order falls back to /proc/loadavg's cursor.
func TestStaleForkCursorFallsBack(t *testing.T) {
	cmd := exec.Command(lookPath(t, "sleep"), "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, kid := os.Getpid(), cmd.Process.Pid
	r := newResolver(t, WithPids(func() ([]int, error) { return []int{self, kid}, nil }))
	if err := r.ProcEvents(); err != nil {
		unavailable(t, "process events: %v", err)
	}
	r.proc.t.events.forkedLast.Store(int64(min(self, kid))) // the drain before the child's fork
	if got := r.newestFirst([]int{self, kid}); got[0] != kid {
		t.Fatalf("with the events' cursor %d behind the child %d: %v, want the child first", min(self, kid), kid, got)
	}
}
