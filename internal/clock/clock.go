package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock reads the time and arms timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f after d, on another goroutine; stop cancels it
	// (false: too late, or already cancelled).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// System is the real clock.
type System struct{}

// Now implements Clock.
func (System) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (System) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Fake is a clock whose time moves only with Advance, which runs the
// functions of the timers that come due (in order, outside the lock, on
// the caller's goroutine).
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[int]fakeTimer
}

type fakeTimer struct {
	at time.Time
	f  func()
}

// NewFake returns a fake clock at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start, timers: map[int]fakeTimer{}} }

// Now implements Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock.
func (c *Fake) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.timers[id] = fakeTimer{at: c.now.Add(d), f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[id]
		delete(c.timers, id)
		return ok
	}
}

// Advance moves the clock by d (back when d is negative) and fires every
// timer due by then.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []fakeTimer
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
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
