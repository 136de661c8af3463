package supervisor_test

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
	"github.com/plugvisor/plugvisor/supervisor/supervisortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	wait  = 2 * time.Second       // how long to wait for what must happen
	quiet = 50 * time.Millisecond // how long to watch for what must not
)

// The test actors' messages.
type (
	// fail makes the child panic with reason.
	fail struct{ reason string }
	// note is passed on by the child to its probe.
	note int
	// started is what the child reports when an incarnation starts.
	started struct{}
	// spawned is what the parent reports when an incarnation starts.
	spawned struct{ parent, child *actor.PID }
)

// childProps is a child that reports each start and each note to report,
// and panics on fail.
func childProps(report *actor.PID, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			ctx.Send(report, started{})
		case note:
			ctx.Send(report, msg)
		case fail:
			panic(msg.reason)
		}
	}, opts...)
}

// tree is a grandparent, a parent and a child, each parent supervising with
// a Strategy on the same fake clock, whose events go to one observer probe.
type tree struct {
	system *actor.ActorSystem
	clock  *supervisortest.FakeClock
	family *probe.Probe // a spawned for each incarnation of the parent
	child  *probe.Probe // a started for each incarnation of the child, and its notes
	inbox  *probe.Probe // the events the parent received
	events *probe.Probe // the events both strategies sent their observer
	parent *actor.PID
	kid    *actor.PID // the current child
}

// newTree starts a tree and waits for the child to start.
func newTree(t *testing.T, parentSpec, grandparentSpec supervisor.Spec) *tree {
	t.Helper()
	system := probe.NewSystem(t)
	tr := &tree{
		system: system,
		clock:  supervisortest.NewFakeClock(t0),
		family: probe.New(t, system),
		child:  probe.New(t, system),
		inbox:  probe.New(t, system),
		events: probe.New(t, system),
	}
	opts := []supervisor.Option{supervisor.WithClock(tr.clock), supervisor.WithObserver(tr.events.PID())}
	parentStrategy, err := supervisor.NewStrategy(parentSpec, opts...)
	require.NoError(t, err)
	grandparentStrategy, err := supervisor.NewStrategy(grandparentSpec, opts...)
	require.NoError(t, err)

	parent := actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.Started:
			ctx.Send(tr.family.PID(), spawned{parent: ctx.Self(), child: ctx.Spawn(childProps(tr.child.PID()))})
		case *messages.ChildSupervised:
			ctx.Send(tr.inbox.PID(), msg)
		}
	}, actor.WithSupervisor(parentStrategy))
	grandparent := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if _, ok := ctx.Message().(*actor.Started); ok {
			ctx.Spawn(parent)
		}
	}, actor.WithSupervisor(grandparentStrategy)))
	t.Cleanup(func() { system.Root.Stop(grandparent) })

	tr.expectSpawned(t)
	return tr
}

// expectSpawned waits for an incarnation of the parent and of its child.
func (tr *tree) expectSpawned(t *testing.T) {
	t.Helper()
	got := probe.Expect[spawned](t, tr.family, wait)
	tr.parent, tr.kid = got.parent, got.child
	probe.Expect[started](t, tr.child, wait)
}

// fail makes the current child panic with "boom".
func (tr *tree) fail() { tr.system.Root.Send(tr.kid, fail{reason: "boom"}) }

// failAndRestart makes the child fail, and checks that it is restarted once
// the clock has moved delay and not a nanosecond before, with the events
// saying so. It returns those events.
func (tr *tree) failAndRestart(t *testing.T, delay time.Duration, failures uint32) []any {
	t.Helper()
	tr.fail()
	want := []any{backingOff(tr.kid, failures, delay), event(tr.kid, restarted, failures)}
	tr.events.ExpectMessages(t, wait, want[0])
	tr.clock.Advance(delay - time.Nanosecond)
	tr.child.ExpectNone(t, quiet)
	tr.events.ExpectNone(t, 0)
	tr.clock.Advance(time.Nanosecond)
	tr.events.ExpectMessages(t, wait, want[1])
	probe.Expect[started](t, tr.child, wait)
	return want
}

const (
	backingOffFor = messages.SupervisionDecision_SUPERVISION_DECISION_BACKING_OFF
	restarted     = messages.SupervisionDecision_SUPERVISION_DECISION_RESTARTED
	stopped       = messages.SupervisionDecision_SUPERVISION_DECISION_STOPPED
	escalated     = messages.SupervisionDecision_SUPERVISION_DECISION_ESCALATED
	gaveUp        = messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP
)

// event is the ChildSupervised expected about child failing with "boom".
func event(child *actor.PID, decision messages.SupervisionDecision, failures uint32) *messages.ChildSupervised {
	return &messages.ChildSupervised{Child: child, Decision: decision, Failures: failures, Reason: "boom"}
}

func backingOff(child *actor.PID, failures uint32, delay time.Duration) *messages.ChildSupervised {
	e := event(child, backingOffFor, failures)
	e.Delay = durationpb.New(delay)
	return e
}

func gaveUpOn(child *actor.PID, failures uint32, escalated bool) *messages.ChildSupervised {
	e := event(child, gaveUp, failures)
	e.Escalated = escalated
	return e
}

func TestStrategyRestartsAfterExponentialBackoff(t *testing.T) {
	spec := supervisor.Spec{MaxRestarts: 3, Within: time.Minute, InitialDelay: time.Second, MaxDelay: 3 * time.Second, Multiplier: 2}
	tr := newTree(t, spec, supervisor.Spec{})

	var all []any
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		all = append(all, tr.failAndRestart(t, delay, uint32(i+1))...)
	}
	tr.clock.Advance(time.Minute)
	all = append(all, tr.failAndRestart(t, time.Second, 1)...)

	tr.inbox.ExpectMessages(t, wait, all...)
	tr.inbox.ExpectNone(t, 0)
}

func TestStrategyGivesUpAfterTheLimitAndStopsTheChild(t *testing.T) {
	spec := supervisor.Spec{MaxRestarts: 2, Within: time.Minute, InitialDelay: time.Second, Multiplier: 3}
	tr := newTree(t, spec, supervisor.Spec{})
	tr.failAndRestart(t, time.Second, 1)
	tr.failAndRestart(t, 3*time.Second, 2)

	tr.child.Watch(t, tr.kid)
	tr.fail()
	tr.events.ExpectMessages(t, wait, gaveUpOn(tr.kid, 3, false))
	tr.child.ExpectTerminated(t, tr.kid, wait)
	require.Zero(t, tr.clock.Pending(), "no restart is scheduled")
	tr.family.ExpectNone(t, quiet)
	tr.events.ExpectNone(t, 0)
}

func TestStrategyGivesUpAndEscalatesSoTheGrandparentRestartsTheParent(t *testing.T) {
	parentSpec := supervisor.Spec{MaxRestarts: 1, Within: time.Minute, InitialDelay: time.Second, OnGiveUp: supervisor.Escalate}
	grandparentSpec := supervisor.Spec{InitialDelay: 5 * time.Second}
	tr := newTree(t, parentSpec, grandparentSpec)
	tr.failAndRestart(t, time.Second, 1)

	oldKid := tr.kid
	tr.child.Watch(t, oldKid)
	tr.fail()
	tr.events.ExpectMessages(t, wait,
		gaveUpOn(oldKid, 2, true),
		backingOff(tr.parent, 1, 5*time.Second))
	tr.clock.Advance(5 * time.Second)
	tr.events.ExpectMessages(t, wait, event(tr.parent, restarted, 1))

	tr.child.ExpectTerminated(t, oldKid, wait)
	oldParent := tr.parent
	tr.expectSpawned(t)
	require.True(t, oldParent.Equal(tr.parent), "the same parent, restarted")
	require.False(t, oldKid.Equal(tr.kid), "a new child")
}

func TestStrategyDeciderStopsTheChild(t *testing.T) {
	spec := supervisor.Spec{Decider: func(any) supervisor.Directive { return supervisor.Stop }}
	tr := newTree(t, spec, supervisor.Spec{})

	tr.child.Watch(t, tr.kid)
	tr.fail()
	tr.events.ExpectMessages(t, wait, event(tr.kid, stopped, 1))
	tr.child.ExpectTerminated(t, tr.kid, wait)
	tr.inbox.ExpectMessages(t, wait, event(tr.kid, stopped, 1))
	require.Zero(t, tr.clock.Pending())
}

func TestStrategyDeciderEscalatesSoTheGrandparentStopsTheParent(t *testing.T) {
	parentSpec := supervisor.Spec{Decider: func(any) supervisor.Directive { return supervisor.Escalate }}
	grandparentSpec := supervisor.Spec{Decider: func(any) supervisor.Directive { return supervisor.Stop }}
	tr := newTree(t, parentSpec, grandparentSpec)

	tr.family.Watch(t, tr.parent)
	tr.child.Watch(t, tr.kid)
	tr.fail()
	tr.events.ExpectMessages(t, wait, event(tr.kid, escalated, 1), event(tr.parent, stopped, 1))
	tr.child.ExpectTerminated(t, tr.kid, wait)
	tr.family.ExpectTerminated(t, tr.parent, wait)
}

func TestStrategyDeliversMessagesQueuedBehindTheFailureAfterTheRestart(t *testing.T) {
	tr := newTree(t, supervisor.Spec{InitialDelay: time.Second}, supervisor.Spec{})
	queued := []any{note(1), note(2), note(3), note(4), note(5)}

	tr.fail()
	for _, n := range queued {
		tr.system.Root.Send(tr.kid, n)
	}
	tr.events.ExpectMessages(t, wait, backingOff(tr.kid, 1, time.Second))
	tr.child.ExpectNone(t, quiet)

	tr.clock.Advance(time.Second)
	probe.Expect[started](t, tr.child, wait)
	tr.child.ExpectMessages(t, wait, queued...)
}

func TestStrategyLeavesAChildStoppedDuringItsBackoff(t *testing.T) {
	tr := newTree(t, supervisor.Spec{InitialDelay: time.Second}, supervisor.Spec{})

	tr.child.Watch(t, tr.kid)
	tr.fail()
	tr.events.ExpectMessages(t, wait, backingOff(tr.kid, 1, time.Second))
	tr.system.Root.Stop(tr.kid)
	tr.child.ExpectTerminated(t, tr.kid, wait)

	tr.clock.Advance(time.Second)
	tr.events.ExpectNone(t, quiet)
}

func TestStrategyUnderAGuardianStopsInsteadOfEscalating(t *testing.T) {
	system := probe.NewSystem(t)
	clock := supervisortest.NewFakeClock(t0)
	events, child := probe.New(t, system), probe.New(t, system)
	strategy, err := supervisor.NewStrategy(
		supervisor.Spec{Decider: func(any) supervisor.Directive { return supervisor.Escalate }},
		supervisor.WithClock(clock), supervisor.WithObserver(events.PID()))
	require.NoError(t, err)

	kid := system.Root.Spawn(childProps(child.PID(), actor.WithGuardian(strategy)))
	t.Cleanup(func() { system.Root.Stop(kid) })
	probe.Expect[started](t, child, wait)
	child.Watch(t, kid)
	system.Root.Send(kid, fail{reason: "boom"})

	events.ExpectMessages(t, wait, event(kid, stopped, 1))
	child.ExpectTerminated(t, kid, wait)
}
