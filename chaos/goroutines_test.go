package chaos

import (
	"bytes"
	"runtime/pprof"
	"slices"
	"testing"
	"time"
)

func parkForDump(ch chan struct{}) { <-ch }

// TestLargestGroups: the leak check's summary names the largest groups of
// a real goroutine profile (debug=1) with their count and function.
func TestLargestGroups(t *testing.T) {
	ch := make(chan struct{})
	defer close(ch)
	for range 7 {
		go parkForDump(ch)
	}
	want := "7 github.com/stockade-dev/stockade/chaos.parkForDump"
	var top []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		if top = largestGroups(b.String(), 3); slices.Contains(top, want) {
			return
		}
	}
	t.Fatalf("largest groups %q: want %q (7 goroutines parked in one place)", top, want)
}
