// Package linelimit is the one implementation of how a workload's output
// is cut into lines and let through at a rate: a Cutter cuts a stream of
// bytes into lines (a line longer than a maximum in pieces, cut at a rune
// boundary; an unfinished line after it waited a while), and a Limiter
// lets them through at a line rate with a burst and a byte rate (token
// buckets); what is not let through is counted by Reason, never kept.
//
// The sandbox's init (package sandbox/nsrun, inside the sandbox's cgroup)
// cuts and limits the workload's stdout and stderr, so that a flood is
// paid for by the sandbox; the supervisor writes what init let through to
// workload.log under the byte rate (the sandbox's io-bps) and says, in a
// marker line, how many lines were dropped and why. Init runs this code as
// pid 1 of every sandbox: the package is the standard library and
// internal/clock only, and its memory is bounded by its callers' buffers.
package linelimit
