// Package testworld starts stockade processes (a gateway, a boundary) for
// the end-to-end tests, the chaos run and the command tests, and waits for
// them by the product's readiness contract: the process is started with
// --ready-file and is ready when that file appears, holding the addresses
// it serves (never by reading its log). The wait polls with a deadline (the
// VM clock can jump), notices a process that died first (the error carries
// its log's tail) and can retry a restart whose fixed port is still taken.
//
// The core, StartProcess, takes a context and no testing.TB, and the
// package does not import "testing": the chaos run, linked into the
// stockade binary, uses it too. Start is the thin wrapper for tests.
// SupervisorsOf finds the supervisors a gateway started under a state dir
// (by command line), for the tests and the bench harness to check or kill.
package testworld
