//go:build race

package audit

// raceEnabled: the race detector slows the randomized encoding test (which
// has no concurrency to check) about tenfold; it runs fewer events then.
const raceEnabled = true
