package supervisor

import "time"

// Clock is the time a Strategy lives by: the time of each failure, and the
// timers that end each backoff. The real clock is the default;
// supervisortest.FakeClock lets a test drive backoff without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless
	// stopped first.
	AfterFunc(d time.Duration, f func()) Stopper
}

// Stopper cancels a timer that Clock.AfterFunc started. Stop reports
// whether it stopped the timer before f was called. *time.Timer is one.
type Stopper interface {
	Stop() bool
}

// realClock is the Clock of package time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Stopper { return time.AfterFunc(d, f) }

// RealClock is the Clock of package time, for packages that take a Clock
// and default to the real one.
var RealClock Clock = realClock{}
