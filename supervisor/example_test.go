package supervisor_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

// A parent supervises a plugin actor that fails on every start. It is told
// of each decision, and here it moves the fake clock past each backoff;
// with the real clock (no WithClock) the restarts come by themselves.
func ExampleNewStrategy() {
	system := actors.NewSystem(nil)
	defer system.Shutdown()
	clock := supervisortest.NewFakeClock(time.Now())
	strategy, err := supervisor.NewStrategy(supervisor.Spec{
		MaxRestarts:  2,
		Within:       time.Minute,
		InitialDelay: time.Second,
		OnGiveUp:     supervisor.Stop,
	}, supervisor.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}

	plugin := actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			panic("socket closed")
		}
	})
	events := make(chan *messages.ChildSupervised, 10)
	parent := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			ctx.Spawn(plugin)
		case *messages.ChildSupervised:
			events <- msg
		}
	}, actor.WithSupervisor(strategy)))
	defer func() { _ = system.Root.StopFuture(parent).Wait() }()

	for e := range events {
		decision := strings.TrimPrefix(e.GetDecision().String(), "SUPERVISION_DECISION_")
		switch e.GetDecision() {
		case messages.SupervisionDecision_SUPERVISION_DECISION_BACKING_OFF:
			fmt.Printf("%s for %v after %d failures (%s)\n", decision, e.GetDelay().AsDuration(), e.GetFailures(), e.GetReason())
			clock.Advance(e.GetDelay().AsDuration())
		case messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP:
			fmt.Printf("%s after %d failures (%s)\n", decision, e.GetFailures(), e.GetReason())
			return
		default:
			fmt.Println(decision)
		}
	}
	// Output:
	// BACKING_OFF for 1s after 1 failures (socket closed)
	// RESTARTED
	// BACKING_OFF for 2s after 2 failures (socket closed)
	// RESTARTED
	// GAVE_UP after 3 failures (socket closed)
}

// A child failing on every start is restarted after growing delays, and
// given up on once it has failed more often within the window than the
// Spec allows.
func ExampleDecide() {
	spec := supervisor.Spec{
		MaxRestarts:  4,
		Within:       time.Minute,
		InitialDelay: time.Second,
		MaxDelay:     5 * time.Second,
		Multiplier:   2,
		OnGiveUp:     supervisor.Stop,
	}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	var history []time.Time
	for {
		d := supervisor.Decide(spec, history, now, "socket closed", 0)
		if d.GaveUp {
			fmt.Printf("failure %d: gave up, %v\n", d.Failures, d.Directive)
			return
		}
		fmt.Printf("failure %d: %v after %v\n", d.Failures, d.Directive, d.Delay)
		history, now = d.History, now.Add(d.Delay)
	}
	// Output:
	// failure 1: restart after 1s
	// failure 2: restart after 2s
	// failure 3: restart after 4s
	// failure 4: restart after 5s
	// failure 5: gave up, stop
}

// Validate names each field that is wrong, here a window given as a bare
// number, which time.Duration reads as nanoseconds.
func ExampleSpec_Validate() {
	err := supervisor.Spec{Within: 1000, Jitter: 1.5}.Validate()
	fmt.Println(err)
	// Output:
	// invalid spec: Within is 1µs, must be at least 1ms (durations are time.Duration: write 10 * time.Second, not 10000)
	// invalid spec: Jitter is 1.5, must be a fraction from 0 to 1
}
