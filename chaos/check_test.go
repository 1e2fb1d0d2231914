package chaos

import "testing"

// TestOfOtherTest: a process in a namespace whose number this run once
// had is skipped only when a supervisor of another run, or another test
// binary, is above it.
func TestOfOtherTest(t *testing.T) {
	const dir, self = "/tmp/stockade-chaos-1", 5
	ps := map[int]proc{
		5:  {ppid: 1, cmd: "/tmp/go-build1/b001/chaos.test -test.count=1"},
		10: {ppid: 5, cmd: "/bin/stockade gateway run --state-dir /tmp/stockade-chaos-1/state"},
		11: {ppid: 10, cmd: "/bin/stockade supervisor --spec /tmp/stockade-chaos-1/state/sandboxes/a/spec.json"},
		12: {ppid: 11, cmd: "stockade-nsrun-init"},
		13: {ppid: 12, cmd: "sleep 1000001"},
		20: {ppid: 1, cmd: "/bin/stockade supervisor --spec /tmp/TestClusterFailover1/001/sandboxes/f1/spec.json"},
		21: {ppid: 20, cmd: "stockade-nsrun-init"},
		22: {ppid: 21, cmd: "sleep infinity"},
		30: {ppid: 1, cmd: "stockade-nsrun-init"}, // its supervisor is gone
		31: {ppid: 30, cmd: "sleep 1000001"},
		40: {ppid: 41, cmd: "sleep 5"}, // its parent vanished while reading
		50: {ppid: 1, cmd: "/tmp/go-build2/b001/nsrun.test -test.count=1"},
		51: {ppid: 50, cmd: "stockade-nsrun-init"},
		52: {ppid: 51, cmd: "sleep 60"},
		60: {ppid: self, cmd: "sleep 3"}, // this test's own child
	}
	for pid, want := range map[int]bool{13: false, 12: false, 22: true, 21: true, 20: true, 31: false, 30: false, 40: false, 52: true, 51: true, 60: false} {
		if got := ofOtherTest(ps, self, pid, dir); got != want {
			t.Errorf("pid %d (%s): ofOtherTest = %v, want %v", pid, ps[pid].cmd, got, want)
		}
	}
}
