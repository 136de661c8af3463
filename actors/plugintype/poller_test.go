package plugintype_test

import (
	"context"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
)

// result is what the polling actor tells the test: the n-th check's
// outcome, and whether its context had ended.
type result struct {
	n        int
	timedOut bool
}

func TestPollerChecksOffTheActorOneAtATimeAndStopsCleanly(t *testing.T) {
	system := probe.NewSystem(t)
	p := probe.New(t, system)
	stuck := make(chan struct{}) // the third check blocks until its timeout
	var poll *plugintype.Poller[result]
	n := 0 // only the check's goroutine touches n, one check at a time
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if r, ok := poll.Receive(ctx); ok {
			ctx.Send(p.PID(), r)
			return
		}
		switch ctx.Message().(type) {
		case *actor.Started:
			poll = plugintype.NewPoller(10*time.Millisecond, 50*time.Millisecond, func(ctx context.Context) result {
				n++
				if n == 3 {
					select {
					case <-stuck:
					case <-ctx.Done():
					}
				}
				return result{n: n, timedOut: ctx.Err() != nil}
			})
			poll.Start(ctx)
			poll.Start(ctx) // a check is running: nothing more starts
		case *actor.Stopping:
			poll.Stop()
		}
	}))
	p.ExpectMessages(t, time.Second, result{n: 1}, result{n: 2}, result{n: 3, timedOut: true}, result{n: 4})
	require.NoError(t, system.Root.StopFuture(pid).Wait())
}
