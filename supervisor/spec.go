package supervisor

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/plugvisor/plugvisor/errclass"
)

// Default values that WithDefaults gives the zero fields of a Spec.
const (
	// DefaultMaxRestarts is the default Spec.MaxRestarts.
	DefaultMaxRestarts = 5
	// DefaultWithin is the default Spec.Within.
	DefaultWithin = time.Minute
	// DefaultInitialDelay is the default Spec.InitialDelay.
	DefaultInitialDelay = 100 * time.Millisecond
	// DefaultMaxDelay is the default Spec.MaxDelay.
	DefaultMaxDelay = 10 * time.Second
	// DefaultMultiplier is the default Spec.Multiplier.
	DefaultMultiplier = 2.0
)

// MinWithin is the shortest restart window Validate accepts. A shorter one
// is almost always a bare number taken for milliseconds or seconds
// (protoactor's own example passes 1000 and gets a window of 1µs).
const MinWithin = time.Millisecond

// ErrInvalidSpec is wrapped by every problem Validate and NewStrategy
// report.
var ErrInvalidSpec = errclass.New(errclass.Invalid, "invalid spec")

// Directive is what a Decider asks for when a child fails.
type Directive int

// The directives a Decider may return. The zero Directive is none of them:
// in Spec.OnGiveUp it means "the default" (Stop), and from a Decider it is
// treated like any unknown value, as Escalate.
const (
	// Restart restarts the child after the backoff delay, while the
	// restart limit allows; past it the Spec's OnGiveUp applies.
	Restart Directive = iota + 1
	// Stop stops the child. Its queued messages are discarded.
	Stop
	// Escalate hands the failure to the parent's own supervisor, which
	// restarts or stops the parent (and with it the child) per its strategy.
	Escalate
)

// String returns the directive's name.
func (d Directive) String() string {
	switch d {
	case Restart:
		return "restart"
	case Stop:
		return "stop"
	case Escalate:
		return "escalate"
	default:
		return fmt.Sprintf("Directive(%d)", int(d))
	}
}

// Decider chooses a Directive by the reason a child failed (the value it
// panicked with). It must be quick, must not block and should be pure: it
// runs on the parent's goroutine, while the Strategy holds its lock.
type Decider func(reason any) Directive

// AlwaysRestart is the default Decider: every failure asks for a restart.
func AlwaysRestart(any) Directive { return Restart }

// Spec is a restart policy as data. Its zero value is a usable policy: zero
// fields are given the defaults by WithDefaults (see each field).
//
// A child may be restarted at most MaxRestarts times within any window of
// length Within; the failure after that gives up, and OnGiveUp says what
// then happens. The n-th failure inside the window is restarted after
//
//	min(MaxDelay, InitialDelay × Multiplier^(n-1))
//
// less a random fraction of up to Jitter of that delay, so MaxDelay is a
// true upper bound. Failures older than Within are forgotten, so a child
// that has run well for a while starts again from InitialDelay.
type Spec struct {
	// MaxRestarts is how many restarts are allowed within the window
	// (default DefaultMaxRestarts). A child that must never be restarted
	// gets a Decider that returns Stop or Escalate.
	MaxRestarts int
	// Within is the length of the sliding window in which failures count
	// (default DefaultWithin; at least MinWithin).
	Within time.Duration
	// InitialDelay is the backoff before the first restart in a window
	// (default DefaultInitialDelay, or MaxDelay when that is shorter).
	InitialDelay time.Duration
	// MaxDelay caps the backoff (default DefaultMaxDelay, or InitialDelay
	// when that is longer).
	MaxDelay time.Duration
	// Multiplier is the growth of the delay from one failure to the next,
	// at least 1 (default DefaultMultiplier).
	Multiplier float64
	// Jitter is the largest fraction, in [0, 1], taken off each delay at
	// random, so that children failing together do not restart together.
	// Zero means no jitter.
	Jitter float64
	// OnGiveUp is Stop (the default) or Escalate: what happens to a child
	// that fails once more than MaxRestarts allows within the window.
	OnGiveUp Directive
	// Decider chooses by the failure's reason between restarting (under
	// the limits above), stopping and escalating (default AlwaysRestart).
	Decider Decider
}

// WithDefaults returns s with each zero field set to its default. It is the
// one place defaults are decided; fields set to bad values are kept as they
// are, for Validate to report.
func (s Spec) WithDefaults() Spec {
	if s.MaxRestarts == 0 {
		s.MaxRestarts = DefaultMaxRestarts
	}
	if s.Within == 0 {
		s.Within = DefaultWithin
	}
	if s.InitialDelay == 0 {
		s.InitialDelay = DefaultInitialDelay
		if s.MaxDelay > 0 {
			s.InitialDelay = min(s.InitialDelay, s.MaxDelay)
		}
	}
	if s.MaxDelay == 0 {
		s.MaxDelay = max(DefaultMaxDelay, s.InitialDelay)
	}
	if s.Multiplier == 0 {
		s.Multiplier = DefaultMultiplier
	}
	if s.OnGiveUp == 0 {
		s.OnGiveUp = Stop
	}
	if s.Decider == nil {
		s.Decider = AlwaysRestart
	}
	return s
}

// Validate reports every problem with s, as completed by WithDefaults, in
// one error (errors.Join); each problem names its field and wraps
// ErrInvalidSpec. A Spec that passes gives up on a child that fails on
// every start, because the delays before its MaxRestarts restarts add up to
// less than Within.
func (s Spec) Validate() error {
	s = s.WithDefaults()
	var problems []error
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...))
	}
	if s.MaxRestarts < 0 {
		bad("MaxRestarts is %d, must not be negative", s.MaxRestarts)
	}
	if s.Within < MinWithin {
		bad("Within is %v, must be at least %v (durations are time.Duration: write 10 * time.Second, not 10000)", s.Within, MinWithin)
	}
	if s.InitialDelay < 0 {
		bad("InitialDelay is %v, must not be negative", s.InitialDelay)
	}
	if s.MaxDelay < 0 {
		bad("MaxDelay is %v, must not be negative", s.MaxDelay)
	}
	if s.MaxDelay < s.InitialDelay {
		bad("MaxDelay %v is shorter than InitialDelay %v", s.MaxDelay, s.InitialDelay)
	}
	if !(s.Multiplier >= 1) || math.IsInf(s.Multiplier, 0) {
		bad("Multiplier is %v, must be a finite number of at least 1", s.Multiplier)
	}
	if !(s.Jitter >= 0 && s.Jitter <= 1) {
		bad("Jitter is %v, must be a fraction from 0 to 1", s.Jitter)
	}
	if s.OnGiveUp != Stop && s.OnGiveUp != Escalate {
		bad("OnGiveUp is %v, must be Stop or Escalate", s.OnGiveUp)
	}
	if len(problems) == 0 {
		if total := s.totalBackoff(); total >= float64(s.Within) {
			bad("the delays before %d restarts add up to %v, not less than Within %v: a child failing on every start would never give up (raise Within, or lower MaxRestarts or the delays)",
				s.MaxRestarts, time.Duration(min(total, math.MaxInt64)), s.Within)
		}
	}
	return errors.Join(problems...)
}

// StopsOnGiveUp reports a spec whose OnGiveUp, with its defaults, is not
// Stop, naming it as field.OnGiveUp (field is the config field that holds
// s); nil otherwise. A manager that reports a child that gave up as failed
// and leaves it stopped needs Stop: Escalate would fail the manager itself.
func (s Spec) StopsOnGiveUp(field string) error {
	if giveUp := s.WithDefaults().OnGiveUp; giveUp != Stop {
		return fmt.Errorf("%s.OnGiveUp is %v, must be stop", field, giveUp)
	}
	return nil
}

// totalBackoff is the sum, in nanoseconds, of the delays without jitter
// before restarts 1 to MaxRestarts: a geometric series up to the cap, then
// MaxDelay for each restart after. s must be complete and otherwise valid.
func (s Spec) totalBackoff() float64 {
	initial, maxDelay, n := float64(s.InitialDelay), float64(s.MaxDelay), float64(s.MaxRestarts)
	if initial >= maxDelay || s.Multiplier == 1 {
		return n * initial
	}
	// Restart i (from 1) is below the cap while initial·m^(i-1) < maxDelay.
	uncapped := min(n, math.Ceil(math.Log(maxDelay/initial)/math.Log(s.Multiplier)))
	return initial*(math.Pow(s.Multiplier, uncapped)-1)/(s.Multiplier-1) + (n-uncapped)*maxDelay
}

// delay is the backoff before restarting after the failures-th failure in
// the window, with jitter fraction rand in [0, 1). s must be complete.
func (s Spec) delay(failures int, rand float64) time.Duration {
	d := s.MaxDelay
	if grown := float64(s.InitialDelay) * math.Pow(s.Multiplier, float64(failures-1)); grown < float64(s.MaxDelay) {
		d = time.Duration(grown)
	}
	return d - time.Duration(float64(d)*s.Jitter*rand)
}
