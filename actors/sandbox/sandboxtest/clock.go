package sandboxtest

import (
	"sort"
	"sync"
	"time"
)

// Clock is a fake clock: Now moves only with Advance, which runs the
// functions of the timers that come due (in order, outside the lock).
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[int]clockTimer
}

type clockTimer struct {
	at time.Time
	f  func()
}

// NewClock returns a clock at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start, timers: map[int]clockTimer{}} }

// Now implements the Clock seam.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements the Clock seam.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.timers[id] = clockTimer{at: c.now.Add(d), f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[id]
		delete(c.timers, id)
		return ok
	}
}

// Advance moves the clock by d and fires every timer due by then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []clockTimer
	for id, t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
			delete(c.timers, id)
		}
	}
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// Pending is the number of armed timers.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
