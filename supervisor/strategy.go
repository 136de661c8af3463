package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/plugvisor/plugvisor/messages"
)

// Strategy is an actor.SupervisorStrategy that carries out a Spec: give it
// to a parent with actor.WithSupervisor(strategy). It keeps each failing
// child's failure history itself, lets Decide choose, and then restarts the
// child once the backoff has passed, stops it, or escalates the failure.
//
// While the backoff runs the child stays suspended: its mailbox keeps the
// messages sent to it, and the restarted child receives them in order. The
// message it failed on is lost, as with any protoactor restart.
//
// Events: every decision is sent as a *messages.ChildSupervised to the
// child's parent and to each observer. The events about one child arrive
// in the order of the decisions (BACKING_OFF, then RESTARTED, then the next
// failure's), and BACKING_OFF is sent only once the backoff timer is set.
// They are ordinary messages: they are lost if the recipient stops, and a
// parent that is restarted or stopped by an escalation may get them after
// its restart, or not at all; an observer sees them all.
//
// A child's history is forgotten when it is stopped or escalated, and, at
// the next failure the Strategy handles, once its last failure has left the
// window; so memory grows only with the children failing recently. One Strategy may serve many parents,
// in many actor systems, at once; it is safe for concurrent use.
type Strategy struct {
	spec      Spec
	clock     Clock
	observers []*actor.PID

	mu        sync.Mutex
	histories map[childKey][]time.Time
}

var _ actor.SupervisorStrategy = (*Strategy)(nil)

// childKey names a child across actor systems: PID ids are unique only
// within one system.
type childKey struct {
	system *actor.ActorSystem
	id     string
}

// Option configures a Strategy in NewStrategy.
type Option func(*Strategy)

// WithClock makes the Strategy read the time and set its backoff timers
// with clock instead of the real clock.
func WithClock(clock Clock) Option {
	return func(s *Strategy) { s.clock = clock }
}

// WithObserver sends every ChildSupervised event to observer too, besides
// the failing child's parent. It may be given more than once.
func WithObserver(observer *actor.PID) Option {
	return func(s *Strategy) { s.observers = append(s.observers, observer) }
}

// NewStrategy returns a Strategy carrying out spec, completed by
// WithDefaults. It fails when spec does not pass Validate, or an option was
// given nil.
func NewStrategy(spec Spec, opts ...Option) (*Strategy, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s := &Strategy{spec: spec.WithDefaults(), clock: realClock{}, histories: map[childKey][]time.Time{}}
	for _, opt := range opts {
		opt(s)
	}
	var problems []error
	if s.clock == nil {
		problems = append(problems, fmt.Errorf("%w: WithClock was given a nil clock", ErrInvalidSpec))
	}
	for _, o := range s.observers {
		if o == nil {
			problems = append(problems, fmt.Errorf("%w: WithObserver was given a nil PID", ErrInvalidSpec))
			break
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return s, nil
}

// Spec returns the Spec the Strategy carries out, with its defaults.
func (s *Strategy) Spec() Spec { return s.spec }

// HandleFailure implements actor.SupervisorStrategy: protoactor calls it
// when child fails with reason while handling message. The child's mailbox
// is suspended until the decision is carried out. rs is not used: its clock
// cannot be replaced, so the Strategy keeps its own history.
//
// Under a guardian (actor.WithGuardian) there is no parent to escalate to:
// Escalate stops the child instead, and the event says so.
func (s *Strategy) HandleFailure(system *actor.ActorSystem, supervisor actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, message any) {
	parent := parentOf(supervisor)
	d := s.decide(system, supervisor, child, parent, reason)
	switch d.Directive {
	case Stop:
		supervisor.StopChildren(child)
	case Escalate:
		supervisor.EscalateFailure(reason, message)
	}
}

// decide records the failure, chooses, sets the backoff timer for a
// restart, and publishes the decision, all under the lock, so that a timer
// cannot publish RESTARTED before its BACKING_OFF. Stopping and escalating
// are left to the caller, outside the lock: escalating to a guardian with
// this same Strategy calls HandleFailure again at once.
func (s *Strategy) decide(system *actor.ActorSystem, supervisor actor.Supervisor, child, parent *actor.PID, reason any) Decision {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	s.forgetOlderThan(now.Add(-s.spec.Within))
	key := childKey{system: system, id: child.GetId()}
	d := Decide(s.spec, s.histories[key], now, reason, rand.Float64())
	if d.Directive == Escalate && parent == nil {
		d.Directive = Stop
	}

	event := &messages.ChildSupervised{
		Child:    &actor.PID{Address: child.GetAddress(), Id: child.GetId()},
		Failures: uint32(d.Failures),
		Reason:   fmt.Sprint(reason),
	}
	switch {
	case d.Directive == Restart:
		s.histories[key] = d.History
		event.Decision = messages.SupervisionDecision_SUPERVISION_DECISION_BACKING_OFF
		event.Delay = durationpb.New(d.Delay)
		// The event is complete before the timer can fire and copy it.
		s.clock.AfterFunc(d.Delay, func() { s.restart(system, supervisor, child, parent, event) })
	case d.GaveUp:
		event.Decision = messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP
		event.Escalated = d.Directive == Escalate
	case d.Directive == Stop:
		event.Decision = messages.SupervisionDecision_SUPERVISION_DECISION_STOPPED
	default:
		event.Decision = messages.SupervisionDecision_SUPERVISION_DECISION_ESCALATED
	}
	if d.Directive != Restart {
		delete(s.histories, key)
	}
	s.publish(system, parent, event)
	return d
}

// restart ends a backoff: it publishes RESTARTED, then restarts the child.
// A child stopped during its backoff (by its parent, say) is left alone.
func (s *Strategy) restart(system *actor.ActorSystem, supervisor actor.Supervisor, child, parent *actor.PID, backingOff *messages.ChildSupervised) {
	if _, alive := system.ProcessRegistry.GetLocal(child.GetId()); !alive {
		return
	}
	event := proto.CloneOf(backingOff)
	event.Decision = messages.SupervisionDecision_SUPERVISION_DECISION_RESTARTED
	event.Delay = nil
	s.mu.Lock()
	s.publish(system, parent, event)
	s.mu.Unlock()
	supervisor.RestartChildren(child)
}

// forgetOlderThan drops the histories whose last failure is not after
// since: Decide would prune them to nothing anyway.
func (s *Strategy) forgetOlderThan(since time.Time) {
	for key, history := range s.histories {
		if !history[len(history)-1].After(since) {
			delete(s.histories, key)
		}
	}
}

// publish logs event and sends a copy of it to parent (when there is one)
// and to each observer.
func (s *Strategy) publish(system *actor.ActorSystem, parent *actor.PID, event *messages.ChildSupervised) {
	level := slog.LevelInfo
	if event.GetDecision() == messages.SupervisionDecision_SUPERVISION_DECISION_GAVE_UP {
		level = slog.LevelWarn
	}
	system.Logger().Log(context.Background(), level, "supervisor: decided about a failed child",
		slog.String("child", event.GetChild().String()),
		slog.String("decision", event.GetDecision().String()),
		slog.Duration("delay", event.GetDelay().AsDuration()),
		slog.Uint64("failures", uint64(event.GetFailures())),
		slog.String("reason", event.GetReason()))
	if parent != nil {
		system.Root.Send(parent, proto.CloneOf(event))
	}
	for _, o := range s.observers {
		system.Root.Send(o, proto.CloneOf(event))
	}
}

// parentOf returns the PID of the actor whose context supervisor is, or
// nil when the supervisor is not an actor (a guardian).
func parentOf(supervisor actor.Supervisor) *actor.PID {
	if self, ok := supervisor.(interface{ Self() *actor.PID }); ok {
		return self.Self()
	}
	return nil
}
