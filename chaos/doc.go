// Package chaos owns stockade's chaos harness: a seeded schedule of faults
// (schedule.go), a world of real gateway and supervisor processes doing
// steady work (world.go, work.go), the injection of each fault kind
// (inject.go), the invariants checked during and after the run (check.go)
// and the report (report.go). `stockade chaos run` and the CI test drive
// it. The fault seam it arms inside the processes is chaos/fault.
package chaos
