package actors

import (
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
)

// PanicStack is receive middleware that logs the stack of a panic in
// Receive, with the actor and the message type, then panics again so the
// actor's supervisor still handles the failure. protoactor on its own logs
// only the panic's reason.
func PanicStack(logger hclog.Logger) actor.ReceiverMiddleware {
	return func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			defer func() {
				if r := recover(); r != nil {
					logger.Error("actor panicked",
						"actor", c.Self().String(),
						"message", fmt.Sprintf("%T", env.Message),
						"reason", fmt.Sprint(r),
						"stack", string(debug.Stack()))
					panic(r)
				}
			}()
			next(c, env)
		}
	}
}
