//go:build race

package policy

// raceEnabled: the race detector slows OPA evaluation about tenfold, so
// the differential test asks fewer inputs (it has no concurrency to check).
const raceEnabled = true
