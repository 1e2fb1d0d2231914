package driver

import (
	"context"
	"errors"
	"time"

	"github.com/stockade-dev/stockade/sandbox/idrange"
	"github.com/stockade-dev/stockade/store"
)

// Launch is what a driver needs to start one supervisor instance.
type Launch struct {
	// Instance names this start; the supervisor's Hello carries it.
	Instance string
	// Spec is the sandbox as created (name, uid, policy, argv, limits).
	Spec store.Spec
	// HostIDs is the sandbox's host uid/gid range (nil: an unprivileged
	// gateway, which maps only its own ids); ShiftIDs are ranges its
	// workspace's files are moved out of first (store.Record).
	HostIDs  *idrange.Range
	ShiftIDs []idrange.Range
}

// Driver starts and finds a sandbox's supervisor, and removes its files.
// Its methods may block (process start, file removal): the sandbox actor
// calls them off its own goroutine, or with a deadline in ctx.
type Driver interface {
	// Start starts the supervisor of an instance on the sandbox's
	// workspace; it fails, with nothing left running, when it cannot.
	Start(ctx context.Context, l Launch) (Proc, error)
	// Adopt finds the supervisor of a sandbox that an earlier gateway
	// started (pid from the record); ErrGone when it no longer runs.
	Adopt(ctx context.Context, name string, pid int) (Proc, error)
	// Remove removes what a deleted sandbox leaves on the node: the logs
	// of creation uid, and the workspace unless keepWorkspace.
	Remove(ctx context.Context, name, uid string, keepWorkspace bool) error
	// Workspace is the host path of a sandbox's workspace.
	Workspace(name string) string
}

// Proc is one running (or adopted) supervisor.
type Proc interface {
	// Pid is the supervisor's process id on the node.
	Pid() int
	// Done is closed when the supervisor has exited.
	Done() <-chan struct{}
	// Err says how it ended, with its last words when known (valid
	// after Done).
	Err() error
	// Stop asks it to end (SIGTERM), waits up to grace, then kills it,
	// and waits for it to be gone, bounded by ctx.
	Stop(ctx context.Context, grace time.Duration) error
}

// ErrGone: the supervisor process does not exist (any more).
var ErrGone = errors.New("supervisor process is gone")

// ErrCannotStart: the supervisor ended before its session came up because
// the sandbox cannot start however often it is retried (the command is
// missing or not executable inside, a hard_requirement path is missing).
// A Proc's Err wraps it, with the supervisor's message naming the path and
// the fix; the sandbox goes to Error/StartFailed without retries. The
// process driver recognises contract.ExitSupervisorCannotStart.
var ErrCannotStart = errors.New("the sandbox cannot start")
