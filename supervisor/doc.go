// Package supervisor is plugvisor's restart policy as data (Spec), the pure
// function that applies it to a failure (Decide), and the protoactor
// SupervisorStrategy that carries it out (Strategy):
//
//	strategy, err := supervisor.NewStrategy(supervisor.Spec{
//		MaxRestarts: 5, Within: time.Minute,
//		InitialDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second,
//		Multiplier: 2, Jitter: 0.2, OnGiveUp: supervisor.Stop,
//	}, supervisor.WithObserver(manager))
//	props := actor.PropsFromProducer(newManager, actor.WithSupervisor(strategy))
//
// The parent's children then restart, back off and give up as the Spec
// says, and the parent and the observer receive a *messages.ChildSupervised
// for each decision: BACKING_OFF (with the delay), RESTARTED, STOPPED,
// ESCALATED or GAVE_UP (with the failure count). Tests drive the backoff
// with supervisortest.FakeClock (WithClock) instead of sleeping.
//
// The policy (the window, the exponential backoff, giving up, and why it
// replaces protoactor's strategies) is in ARCHITECTURE.md ("Restart
// policy").
package supervisor
