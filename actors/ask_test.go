package actors_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// echo answers each ShutdownRegistry with a ShutdownRegistryResponse to its reply_to.
func echo(c actor.Context) {
	if msg, ok := c.Message().(*messages.ShutdownRegistry); ok {
		c.Send(msg.GetReplyTo(), &messages.ShutdownRegistryResponse{})
	}
}

func TestAskReturnsTheAnswerOrSaysWhyThereIsNone(t *testing.T) {
	build := func(replyTo *actor.PID) any { return &messages.ShutdownRegistry{ReplyTo: replyTo} }
	tests := []struct {
		name    string
		target  func(system *actor.ActorSystem) *actor.PID
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
		// wantClass is the error's class (errclass), when it has one.
		wantClass *errclass.Class
	}{
		{
			name:   "an actor that answers gives its answer",
			target: func(s *actor.ActorSystem) *actor.PID { return s.Root.Spawn(actor.PropsFromFunc(echo)) },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 5*time.Second)
			},
		},
		{
			name: "an actor that is gone gives ErrTargetGone at once",
			target: func(s *actor.ActorSystem) *actor.PID {
				pid := s.Root.Spawn(actor.PropsFromFunc(echo))
				require.NoError(t, s.Root.StopFuture(pid).Wait())
				return pid
			},
			ctx:       func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			wantErr:   actors.ErrTargetGone,
			wantClass: errclass.ShutDown,
		},
		{
			name: "an actor that never answers gives the context's error",
			target: func(s *actor.ActorSystem) *actor.PID {
				return s.Root.Spawn(actor.PropsFromFunc(func(actor.Context) {}))
			},
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 50*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			system := probe.NewSystem(t)
			target := tt.target(system)
			t.Cleanup(func() { system.Root.Stop(target) })
			ctx, cancel := tt.ctx()
			defer cancel()
			answer, err := actors.Ask(ctx, system, target, build)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				if tt.wantClass != nil {
					require.ErrorIs(t, err, tt.wantClass)
				}
				return
			}
			require.NoError(t, err)
			require.IsType(t, &messages.ShutdownRegistryResponse{}, answer)
		})
	}
}
