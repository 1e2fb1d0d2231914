// Package logs reads the logs of one creation of a sandbox (its log
// directory, contract.StateDir.Logs): the workload's output
// (workload.log, written by the supervisor: "TIME STREAM LINE" lines after
// WorkloadHeader, workload.go; the JSON objects and plain lines of earlier
// supervisors still read), the boundary's decisions (audit.jsonl) and the
// sandbox's transitions (lifecycle.jsonl), both audit events as JSON lines
// (package audit). Each is rotated to FILE.1 (the newest) .. FILE.N and
// read across them, oldest first.
//
// A Reader merges the sources in time order, applies since and tail (the
// last N entries of the merged result, found by reading the files
// backwards, so that a tail of a large log costs what it shows), and, when
// following, picks up what is appended later (rotations included). It
// does no waiting of its own: the caller polls Next. Format and JSON render
// an entry for the CLI. The package has no actors and no I/O but the files
// it is given.
package logs
