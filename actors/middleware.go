package actors

import (
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
)

// PanicStack is receive middleware that logs the stack of a panic in
// Receive, with the actor and the message type. Then it panics again, so
// that the actor's supervisor still handles the failure. protoactor on its
// own logs only the panic's reason.
func PanicStack(logger hclog.Logger) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			defer func() {
				if r := recover(); r != nil {
					logPanic(logger, c.Self(), env.Message, r)
				}
			}()
			next(c, env)
		}
	}
}

// LogPanic is PanicStack for an actor that defers it first thing in its
// own Receive: `defer actors.LogPanic(logger, ctx)`. It logs the same
// entry and panics again. A receiver middleware makes protoactor wrap
// every message in an envelope, which costs an allocation per message. An
// actor on a hot path, such as the registry, does without it.
func LogPanic(logger hclog.Logger, c actor.Context) {
	if r := recover(); r != nil {
		logPanic(logger, c.Self(), c.Message(), r)
	}
}

// logPanic logs the panic r of self's Receive of msg, with the stack, and
// panics again with r.
func logPanic(logger hclog.Logger, self *actor.PID, msg any, r any) {
	logger.Error("actor panicked",
		"actor", self.String(),
		"message", fmt.Sprintf("%T", msg),
		"reason", fmt.Sprint(r),
		"stack", string(debug.Stack()))
	panic(r)
}
