package discovery

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	actorprobe "github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
)

// hold is a message on which holdMiddleware keeps the actor until gate is closed.
type hold struct{ gate chan struct{} }

// holdMiddleware makes an actor wait on a hold message, so that a test can
// queue messages behind it.
func holdMiddleware(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		if h, ok := env.Message.(*hold); ok {
			<-h.gate
			return
		}
		next(c, env)
	}
}

// A directory change that reaches the discovery actor while it stops (a
// watcher's news queued behind the stop) starts no scan: a scan's result
// would otherwise find the plugins whose activators just stopped and start
// new ones, children that nobody stops, and the actor would never finish
// stopping. Nor are its subscribers told that its activators stopped
// unexpectedly: they stop with it.
func TestADirectoryChangeWhileStoppingStartsNothing(t *testing.T) {
	e := newEnv(t, nil)
	require.NoError(t, e.d.Shutdown()) // the test starts discovery actors of its own
	volumePlugin(t, filepath.Join(e.sockets, "vol.sock"))
	for i := range 10 {
		cfg := testConfig()
		cfg.Name, cfg.Dirs, cfg.Registry, cfg.Logger = fmt.Sprintf("stopping%d", i), Dirs{Sockets: []string{e.sockets}}, e.registry, hclog.NewNullLogger()
		cfg = cfg.withDefaults()
		published := &atomic.Pointer[[]*messages.DiscoveredPlugin]{}
		published.Store(&[]*messages.DiscoveredPlugin{})
		props := actor.PropsFromProducer(func() actor.Actor { return newDiscoveryActor(cfg, published, plugintype.NewSubscribers()) },
			actor.WithReceiverMiddleware(holdMiddleware))
		root := e.d.system.Root
		pid, err := root.SpawnNamed(props, cfg.Name)
		require.NoError(t, err)
		events := actorprobe.New(t, e.d.system)
		events.Send(pid, &messages.SubscribeDiscovery{Subscriber: events.PID(), Replay: true})
		actorprobe.FishFor(t, events, wait, func(m *messages.DiscoveredPluginChanged) bool {
			return m.GetPlugin().GetState() == messages.DiscoveredPluginState_DISCOVERED_PLUGIN_STATE_REGISTERED
		})

		gate := make(chan struct{})
		root.Send(pid, &hold{gate: gate})
		root.Send(pid, &messages.DiscoveryDirectoryChanged{Dir: e.sockets, Rescan: true})
		stopped := root.StopFuture(pid) // system messages go first: the change is handled while it stops
		close(gate)
		require.NoError(t, stopped.Wait(), "stop %d", i)
		events.ExpectNone(t, 100*time.Millisecond) // no "activator stopped unexpectedly" either
	}
}
