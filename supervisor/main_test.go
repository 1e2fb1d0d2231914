package supervisor

import (
	"os"
	"testing"

	"github.com/stockade-dev/stockade/sandbox/nsrun"
)

// TestMain lets the test binary be a sandbox's init and exec stages (the
// workload log's test through a real init).
func TestMain(m *testing.M) {
	nsrun.MaybeRunStage()
	os.Exit(m.Run())
}
