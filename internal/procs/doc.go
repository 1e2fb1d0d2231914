// Package procs scales the number of processors that run Go code
// (GOMAXPROCS) in a process that hosts a boundary (`boundary serve`, the
// supervisor) to the load it sees: one processor while work comes one
// piece at a time, all of them (the runtime's default: the CPUs, the
// affinity mask, a cgroup's CPU limit) while goroutines wait to run.
// Setting one processor stops the runtime's own updates of the count;
// each return to all of them hands the count back to the runtime
// (runtime.SetDefaultGOMAXPROCS), and so does the scaler's end.
//
// Why: with two processors and one client at a time, each goroutine made
// runnable wakes the idle processor's thread, and the boundary pays those
// wake-ups (measured on a 2-core machine: 15% of the CPU per tunnel, 12.4
// against 7.7 context switches per tunnel, 10% of the p50). Under parallel
// load one processor caps the rate (13-18% fewer tunnels at 16 and 64
// clients), so the scaler goes back to all of them.
//
// The signal is the Go scheduler's own latencies (runtime/metrics
// "/sched/latencies:seconds": how long runnable goroutines waited for a
// processor) and the process's CPU time: a window where more than
// UpFraction of the waits exceeded SlowWait, or where one processor was
// nearly all used, scales up; a run of windows with almost no slow waits
// scales down. The share of slow waits is judged only in a window of at
// least MinEvents recorded waits (the runtime records a sample of them).
// A return to all processors within twice the current hold of a return
// to one doubles the hold, how long the quiet run must be (HoldMin to
// HoldMax), so a load on the edge does not flap.
//
// An operator who sets GOMAXPROCS in the environment keeps it: the scaler
// does not start (Start logs so at debug). Seams: Sampler (what the window
// saw), the setter (runtime.GOMAXPROCS and runtime.SetDefaultGOMAXPROCS)
// and the clock are options, and Decide is a pure function of its state
// and one window, tested without a runtime.
package procs
