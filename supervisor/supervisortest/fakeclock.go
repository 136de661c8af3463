// Package supervisortest holds test helpers for code supervised by
// package supervisor: a FakeClock that drives backoff without sleeping.
//
//	clock := supervisortest.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
//	strategy, err := supervisor.NewStrategy(spec, supervisor.WithClock(clock))
//	// ... a child fails; wait for the BACKING_OFF event, which is sent
//	// only once the timer is set, then:
//	clock.Advance(delay) // the child is restarted now
package supervisortest

import (
	"slices"
	"sync"
	"time"

	"github.com/plugvisor/plugvisor/supervisor"
)

// FakeClock is a supervisor.Clock whose time moves only when Advance is
// called. Its timers run their functions on the goroutine that calls
// Advance, not on one of their own. It is safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // in creation order
}

var _ supervisor.Clock = (*FakeClock)(nil)

type fakeTimer struct {
	clock *FakeClock
	due   time.Time
	f     func()
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc sets a timer that calls f when Advance reaches d from now. A
// timer with d <= 0 fires at the next Advance, Advance(0) included.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) supervisor.Stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, due: c.now.Add(max(d, 0)), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d, firing each timer that falls due on
// the way, in order of due time, with the clock reading that due time while
// it fires. Timers set by those functions fire too if due within d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		t := c.popDue(target)
		if t == nil {
			break
		}
		t.f()
	}
	c.mu.Lock()
	c.now = target
	c.mu.Unlock()
}

// Pending returns how many timers are set and have not fired or stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// popDue removes and returns the earliest timer due at or before target,
// setting the clock to its due time, or returns nil when none is due.
func (c *FakeClock) popDue(target time.Time) *fakeTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return nil
	}
	i := 0
	for j, t := range c.timers {
		if t.due.Before(c.timers[i].due) {
			i = j // the timers are kept in creation order, so ties keep the first
		}
	}
	t := c.timers[i]
	if t.due.After(target) {
		return nil
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	if t.due.After(c.now) {
		c.now = t.due
	}
	return t
}

// Stop cancels the timer, reporting whether it had not fired yet.
func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}
