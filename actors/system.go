package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
)

// NewSystem returns an actor system whose own log lines go to logger,
// under the name "actor". A nil logger discards them. opts are passed on to
// protoactor after plugvisor's, so a caller may override them.
//
// Dead letters are logged at most three per 100ms window; protoactor's
// default window is a second. protoactor keeps a goroutine alive for one
// window after a dead letter. The short window means that nothing is left
// running soon after a shutdown.
//
// Remember that ActorSystem.Shutdown stops no actors: the owner of each
// top-level actor stops it before shutting the system down.
func NewSystem(logger hclog.Logger, opts ...actor.ConfigOption) *actor.ActorSystem {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	handler := NewSlogHandler(logger.Named("actor"))
	all := append([]actor.ConfigOption{
		actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
			return slog.New(handler).With("system", system.ID)
		}),
		actor.WithDeadLetterThrottleInterval(100 * time.Millisecond),
	}, opts...)
	return actor.NewActorSystem(all...)
}
