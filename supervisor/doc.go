// Package supervisor is plugvisor's restart policy as data (Spec), the pure
// function that applies it to a failure (Decide), and the protoactor
// SupervisorStrategy that carries it out (Strategy).
//
// An embedder gives the props of an actor whose children must be restarted
// (a plugin type's manager, say) actor.WithSupervisor(strategy), with the
// strategy NewStrategy makes from a Spec: its children then restart, back
// off and give up as the Spec says, and the parent hears of each decision
// (see the example below).
//
// # The policy
//
// When a child actor fails (panics in Receive), its parent's Strategy asks
// the Spec's Decider what the failure's reason calls for: Restart (the
// default), Stop or Escalate. A restart is allowed while the child has
// failed at most MaxRestarts times within the last Within; it happens after
// a backoff that grows exponentially with the failures in the window,
//
//	delay(n) = min(MaxDelay, InitialDelay × Multiplier^(n-1)), less up to Jitter × delay(n) at random
//
// and during which the child stays suspended, its mailbox keeping the
// messages sent to it. The failure past the limit gives up: the child is
// stopped, or the failure is escalated to the parent's own supervisor, as
// OnGiveUp says. Failures older than Within are forgotten, so a child that
// has run well for a while starts again from InitialDelay.
//
// This replaces protoactor's NewExponentialBackoffStrategy, whose delay grows
// linearly and which never gives up, and NewOneForOneStrategy's window, which
// takes bare numbers (1000 is a window of 1µs) and reads the real clock.
//
// # Example
//
//	strategy, err := supervisor.NewStrategy(supervisor.Spec{
//		MaxRestarts:  5,
//		Within:       time.Minute,
//		InitialDelay: 100 * time.Millisecond,
//		MaxDelay:     10 * time.Second,
//		Multiplier:   2,
//		Jitter:       0.2,
//		OnGiveUp:     supervisor.Stop,
//	}, supervisor.WithObserver(manager))
//	if err != nil {
//		return err
//	}
//	props := actor.PropsFromProducer(newManager, actor.WithSupervisor(strategy))
//
// The parent, and the observer, then receive a *messages.ChildSupervised for
// each decision: BACKING_OFF (with the delay), RESTARTED, STOPPED, ESCALATED
// or GAVE_UP (with the failure count), which is how a manager reports
// "plugin X gave up after N restarts".
//
// Tests drive the backoff with supervisortest.FakeClock, given to
// NewStrategy with WithClock, instead of sleeping.
package supervisor
