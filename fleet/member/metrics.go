package member

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/fleet"
)

// countActivations tells metrics of each volume grain that starts on this
// member; nil metrics: props as they are.
func countActivations(props *actor.Props, metrics fleet.Metrics) *actor.Props {
	if metrics == nil {
		return props
	}
	return props.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			if _, ok := env.Message.(*actor.Started); ok {
				metrics.GrainActivated()
			}
			next(c, env)
		}
	}))
}
