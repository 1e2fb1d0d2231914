package harness

import (
	"slices"
	"testing"
)

// TestRotatedStartsEachRunOneLater checks the order measure uses: over as
// many runs as systems, each system runs first once and at each position
// once, the cyclic order (who follows whom) is kept, and the caller's list
// is not changed.
func TestRotatedStartsEachRunOneLater(t *testing.T) {
	list := []string{"tinyproxy", "stockade", "sandbox", "serve-cgroup", "direct"}
	orig := slices.Clone(list)
	positions := map[string]map[int]bool{}
	for run := range 2 * len(list) {
		got := rotated(list, run)
		if len(got) != len(list) {
			t.Fatalf("run %d: %v has %d systems, want %d", run, got, len(got), len(list))
		}
		if want := list[run%len(list)]; got[0] != want {
			t.Errorf("run %d starts with %s, want %s", run, got[0], want)
		}
		for i, s := range got {
			if next, want := got[(i+1)%len(got)], list[(slices.Index(list, s)+1)%len(list)]; next != want {
				t.Errorf("run %d: %s is followed by %s, want %s (%v)", run, s, next, want, got)
			}
			if positions[s] == nil {
				positions[s] = map[int]bool{}
			}
			positions[s][i] = true
		}
		got[0] = "changed"
		if !slices.Equal(list, orig) {
			t.Fatalf("run %d: rotated shares the caller's array: %v", run, list)
		}
	}
	for s, at := range positions {
		if len(at) != len(list) {
			t.Errorf("%s ran at positions %v, want every one of %d", s, at, len(list))
		}
	}
	if got := rotated([]string(nil), 3); len(got) != 0 {
		t.Errorf("rotated(nil) = %v, want empty", got)
	}
}
