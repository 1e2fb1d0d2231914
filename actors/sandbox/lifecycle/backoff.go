package lifecycle

import "time"

// Recovery numbers from DESIGN.md.
const (
	// BackoffBase is the delay before the first recovery attempt.
	BackoffBase = 200 * time.Millisecond
	// BackoffMax caps the delay between attempts.
	BackoffMax = 30 * time.Second
	// BackoffJitter is the relative jitter: each delay is its nominal value
	// times a uniform factor in [1-BackoffJitter, 1+BackoffJitter), then
	// clamped to [BackoffBase, BackoffMax].
	BackoffJitter = 0.2
	// MaxRecoveryAttempts failed in a row give Error/RecoveryExhausted.
	MaxRecoveryAttempts = 10
	// HistoryLen is how many transitions a machine keeps.
	HistoryLen = 20
)

// Rand is the jitter source; *math/rand/v2.Rand satisfies it. Float64
// returns a number in [0, 1).
type Rand interface {
	Float64() float64
}

// Backoff returns the delay before the next recovery attempt when attempt
// attempts were already made: BackoffBase doubled attempt times, capped at
// BackoffMax, with BackoffJitter applied, never outside [BackoffBase,
// BackoffMax]. Pure: the same attempt and random draw give the same delay.
func Backoff(attempt int, r Rand) time.Duration {
	d := BackoffBase
	for i := 0; i < attempt && d < BackoffMax; i++ {
		d *= 2
	}
	d = min(d, BackoffMax)
	d = time.Duration(float64(d) * (1 + BackoffJitter*(2*r.Float64()-1)))
	return min(max(d, BackoffBase), BackoffMax)
}
