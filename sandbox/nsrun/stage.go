package nsrun

import (
	"os"
	"runtime"
)

// stageEnv is the hidden marker that makes a re-exec'd binary run a stage.
// The stages get an environment holding only this variable; the workload
// never sees it.
const (
	stageEnv  = "STOCKADE_NSRUN_STAGE"
	stageInit = "init"
	stageExec = "exec"
)

// Descriptors a stage starts with (after stdin, stdout, stderr).
const (
	fdChannel = 3 // the socketpair end to the stage's parent
	fdExe     = 4 // init only: the binary it was exec'd from (via /proc/self/fd)
	fdOutput  = 5 // init only, with Spec.Output: the pipe of the workload's output to the parent
)

// Exit codes of a stage that could not even report over its channel.
const (
	exitNoChannel = 120
	exitBadStage  = 121
	exitFailed    = 122
)

// MaybeRunStage runs the init or exec stage and exits when the process was
// started as one; otherwise it returns at once. A binary that uses Start
// calls it first thing in main (a test binary from TestMain).
func MaybeRunStage() {
	stage, ok := os.LookupEnv(stageEnv)
	if !ok {
		return
	}
	// Capability bounding sets, no_new_privs and Landlock are per thread;
	// the exec stage execs from this one.
	runtime.LockOSThread()
	switch stage {
	case stageInit:
		os.Exit(runInit())
	case stageExec:
		os.Exit(runExec())
	}
	os.Exit(exitBadStage)
}
