// Package logs reads the logs of one creation of a sandbox (its log
// directory, contract.StateDir.Logs): the workload's output
// (workload.log: one JSON object per line, {"t": unix ms, "s": "out" or
// "err", "l": the line}, written by the supervisor), the boundary's
// decisions (audit.jsonl) and the sandbox's transitions (lifecycle.jsonl),
// both audit events as JSON lines (package audit), rotated to FILE.1 ..
// FILE.N.
//
// A Reader merges the sources in time order, applies since and tail (the
// last N entries of the merged result, found by reading the files
// backwards, so that a tail of a large log costs what it shows), and, when
// following, picks up what is appended later (rotations included). It
// does no waiting of its own: the caller polls Next. Format and JSON render
// an entry for the CLI. The package has no actors and no I/O but the files
// it is given.
package logs
