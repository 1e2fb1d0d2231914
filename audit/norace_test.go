//go:build !race

package audit

// raceEnabled reports a build with the race detector.
const raceEnabled = false
