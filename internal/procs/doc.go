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
// load with CPUs to spare one processor caps the rate (13-18% fewer
// tunnels at 16 and 64 clients, measured before identity came from the
// kernel's records), so the scaler goes back to all of them when the
// machine has room for them (below).
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
// Slow waits alone do not say that a second processor would help: when
// the CPUs the process may run on are busy anyway (a load generator and
// an upstream on the same two cores, a sandbox's own workload), more
// processors only add wake-ups and compete for the same CPUs. So slow
// waits scale up only while those CPUs were idle at least UpIdle CPUs'
// worth on average (/proc/stat, the affinity mask), and at all
// processors a window where they were idle less than DownIdle while the
// process used less than UpCPU of one CPU counts as quiet. Measured on a
// 2-core machine with the load generator beside the boundary (6 rounds
// of 3 s, medians against tinyproxy in the same rounds): at 16 clients
// 1.23x its tunnels at 0.73x its CPU per tunnel, against 1.08x at 0.92x
// before; at 64 clients 1.22x at 0.77x against 1.15x at 0.95x. The CPU
// rule (one processor nearly all used) is not gated: a boundary that gets
// 0.9 of a CPU from one processor gets all of them on a busy machine too.
// One that other work holds to less (a CPU-bound workload beside its
// supervisor on a full machine) stays at one processor and shares the
// CPUs with that work, where more processors would take a larger share
// from it. The idle is the host's (/proc/stat): a process held back by
// its own cgroup's CPU quota on an idle host passes the gate, as before
// the gate existed, and on a machine of many CPUs half a CPU is nearly
// always idle, so there the rule is the one of before.
//
// Slow waits do not say either that the work is parallel. A DNS load
// (one read loop handing a batch at a time to an actor) waits for one
// processor now and then, with idle CPUs beside it, and did a fifth less
// at two (measured on a 2-core machine, dnsperf against `boundary serve`:
// 197k queries/s at GOMAXPROCS=1, 160k with the scaler at two): each
// hand-off then wakes the other processor's thread. So when the process
// counts its work (WithWork: a boundary's connections and queries), a
// return to all processors is a trial: after TrialWindows their rate of
// work is compared with the rate of the window at one that asked for
// more, and below TrialGain times it, unless the process used TrialCPU
// CPUs or more (work side by side that the count does not see: a
// tunnel's bytes, a supervisor's exec streams), the scaler goes back to
// one and does not return before TrialBlock has passed (doubling with
// each such trial in a row, up to HoldMax; a trial with gain starts it
// over).
//
// An operator who sets GOMAXPROCS in the environment keeps it: the scaler
// does not start (Start logs so at debug). Seams: Sampler (what the window
// saw, the idle CPUs included; without /proc/stat the idle is unknown and
// gates nothing), the work counter (without it, no trials), the setter
// (runtime.GOMAXPROCS and runtime.SetDefaultGOMAXPROCS) and the clock are
// options, and Decide is a pure function of its state and one window,
// tested without a runtime.
package procs
