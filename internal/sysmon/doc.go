// Package sysmon keeps the Go runtime's monitor thread (sysmon) out of its
// deep sleep in stockade's boundary processes (`boundary serve` and every
// sandbox's supervisor), through the runtime's own GODEBUG switch.
//
// Why: when every processor of a Go program is idle, sysmon parks until the
// next system call wakes it, then polls every 20 µs until the program is
// idle again. A boundary that serves one connection at a time goes idle
// between connections, so each tunnel paid for a futex wake of sysmon and a
// few of its 20 µs sleeps: on this project's 2-CPU VM, where a timer wake-up
// costs about 30 µs, that was about a fifth of the boundary's CPU per
// tunnel at one client and a tenth at 16 (docs/bench-history.md, "What
// stop 34 found and changed"). With GODEBUG schedtrace set, the runtime
// never lets sysmon deep-sleep; an idle sysmon then backs off to one
// wake-up per 10 ms, which is the price: about 100 wake-ups a second in an
// idle boundary (measured at +3 ms of CPU per second on that VM).
//
// The period given, 2147483647 ms (the largest the runtime accepts, 24.8
// days), is when the runtime prints its one-line scheduler summary to
// standard error: on a machine up for longer than that, one line at start
// and one every 24.8 days after.
//
// With schedtrace set, the runtime also prints its detailed scheduler state
// (a line per processor, thread and goroutine) to standard error before
// the message of a fatal error (an unrecovered panic, a throw, SIGQUIT):
// crash output is longer, and starts with that state.
//
// An operator opts out by giving GODEBUG a schedtrace of their own
// (GODEBUG=schedtrace=0 restores Go's default); Env and Reexec leave such
// an environment as it is.
package sysmon
