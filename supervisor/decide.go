package supervisor

import (
	"time"
)

// Decision is what Decide chose to do about one failure.
type Decision struct {
	// Directive is Restart (after Delay), Stop or Escalate.
	Directive Directive
	// GaveUp is set when the restart limit was passed; Directive is then
	// the Spec's OnGiveUp.
	GaveUp bool
	// Delay is the backoff before the restart (Restart only).
	Delay time.Duration
	// Failures counts the failures inside the window, this one included.
	Failures int
	// History holds the times of those failures, oldest first: the history
	// to pass to Decide at the child's next failure.
	History []time.Time
}

// Decide chooses what to do about a child's failure at now, given the
// times of its earlier failures (oldest first), the failure's reason and a
// random number in [0, 1) for the jitter. It is a pure function (given a
// pure Decider): the same arguments always give the same Decision, and
// history is not modified.
//
// spec is completed by WithDefaults and should be valid (see Validate). A
// Decider returning anything but Restart, Stop or Escalate counts as
// Escalate, so the parent's supervisor sees the failure.
func Decide(spec Spec, history []time.Time, now time.Time, reason any, rand float64) Decision {
	spec = spec.WithDefaults()
	d := Decision{History: prune(history, now.Add(-spec.Within))}
	d.History = append(d.History, now)
	d.Failures = len(d.History)

	switch directive := spec.Decider(reason); {
	case directive == Stop:
		d.Directive = Stop
	case directive != Restart:
		d.Directive = Escalate
	case d.Failures > spec.MaxRestarts:
		d.Directive, d.GaveUp = spec.OnGiveUp, true
	default:
		d.Directive, d.Delay = Restart, spec.delay(d.Failures, rand)
	}
	return d
}

// prune returns a new slice of the times in history after since.
func prune(history []time.Time, since time.Time) []time.Time {
	kept := make([]time.Time, 0, len(history)+1)
	for _, t := range history {
		if t.After(since) {
			kept = append(kept, t)
		}
	}
	return kept
}
