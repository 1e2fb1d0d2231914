// Package clock is the time seam of the code that schedules work: Clock
// reads the time and arms timers; System is the real clock, and Fake one
// that moves only when a test advances it, firing the timers that come
// due. The sandbox actor's backoff and deadlines and the audit log's
// denial limit take a Clock, so their tests run without waiting.
package clock
