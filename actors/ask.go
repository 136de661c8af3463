package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/errclass"
)

// ErrTargetGone is returned by Ask when the actor asked stopped, or was
// never there, before it answered. Its class is errclass.ShutDown.
var ErrTargetGone = errclass.New(errclass.ShutDown, "the actor asked is gone")

// Ask is request and reply for Go callers that are not actors. It uses no
// protoactor Future.
//
// Ask spawns a one-shot reply actor. The reply actor watches target and
// sends it the message that build makes for the reply actor's address;
// build puts that address in the message's reply_to. Ask returns:
//   - the first message the reply actor receives;
//   - ErrTargetGone when target stops, or does not exist, before it
//     answers;
//   - ctx's error when ctx ends first. That is safe while an answer is in
//     flight: the late answer goes to a dead letter.
//
// Never call Ask from inside an actor's Receive. There, send with
// ctx.Request and handle the answer as a message.
func Ask(ctx context.Context, system *actor.ActorSystem, target *actor.PID, build func(replyTo *actor.PID) any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	answers := make(chan any, 1)
	reply := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch msg := c.Message().(type) {
		case *actor.Started:
			c.Watch(target)
			c.Send(target, build(c.Self()))
		case *actor.Stopping:
			c.Unwatch(target)
		case *actor.Terminated:
			if msg.GetWho().Equal(target) {
				deliver(answers, ErrTargetGone)
				c.Stop(c.Self())
			}
		case actor.SystemMessage, actor.AutoReceiveMessage:
		default:
			deliver(answers, msg)
			c.Stop(c.Self())
		}
	}))
	select {
	case answer := <-answers:
		if err, ok := answer.(error); ok && errors.Is(err, ErrTargetGone) {
			return nil, fmt.Errorf("%w: %s", ErrTargetGone, target)
		}
		return answer, nil
	case <-ctx.Done():
		system.Root.Stop(reply)
		return nil, ctx.Err()
	}
}

// deliver hands the first answer to the waiting caller and drops any later
// one. The reply actor may receive more before its Stop takes effect.
func deliver(answers chan<- any, answer any) {
	select {
	case answers <- answer:
	default:
	}
}
