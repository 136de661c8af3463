package registry_test

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const csiNode = "csi-node"

// plugin is alloc-<idx> of "my-plugin", as in Nomad's registry tests.
func plugin(idx int) *messages.PluginInfo {
	return pluginNamed("my-plugin", idx)
}

func pluginNamed(name string, idx int) *messages.PluginInfo {
	id := fmt.Sprintf("alloc-%d", idx)
	return &messages.PluginInfo{
		Name:       name,
		Type:       csiNode,
		Version:    fmt.Sprintf("v%d", idx),
		Connection: &messages.ConnectionInfo{SocketPath: "/var/data/alloc/" + id + "/csi.sock"},
		AllocId:    id,
	}
}

// memoryBucket returns a bucket of a fresh in-memory store.
func memoryBucket(t *testing.T) storage.Bucket {
	t.Helper()
	b, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(t, err)
	return b
}

// start runs a registry on bucket in system and shuts it down with the test.
func start(t *testing.T, system *actor.ActorSystem, bucket storage.Bucket, dispensers map[string]registry.Dispenser) *registry.Registry {
	t.Helper()
	return startWith(t, system, registry.Config{Bucket: bucket, Dispensers: dispensers, Name: fmt.Sprintf("registry-%p", bucket)})
}

// startWith runs a registry with cfg, logging to the test, in system and
// shuts it down with the test.
func startWith(t *testing.T, system *actor.ActorSystem, cfg registry.Config) *registry.Registry {
	t.Helper()
	cfg.Logger = probe.Logger(t)
	r, err := registry.New(system, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	return r
}

// newRegistry is a registry kept in memory (registry.MemoryStore) with an
// echo dispenser. The tests of a store that takes records (a bucket of
// storage.Memory or storage.Bolt) use start.
func newRegistry(t *testing.T) (*registry.Registry, *actor.ActorSystem) {
	t.Helper()
	system := probe.NewSystem(t)
	return startWith(t, system, registry.Config{Memory: registry.NewMemoryStore(), Dispensers: echoDispensers()}), system
}

func echoDispensers() map[string]registry.Dispenser {
	return map[string]registry.Dispenser{
		csiNode: func(info *messages.PluginInfo) (any, error) { return info, nil },
	}
}

// subscribe makes p a subscriber of ptype and waits for the acknowledgement.
func subscribe(t *testing.T, r *registry.Registry, p *probe.Probe, ptype string, replay bool) *messages.Subscribed {
	t.Helper()
	p.Send(r.PID(), &messages.Subscribe{Type: ptype, Subscriber: p.PID(), Replay: replay})
	return probe.Expect[*messages.Subscribed](t, p, timeout)
}

func dispense(t *testing.T, r *registry.Registry) *messages.PluginInfo {
	t.Helper()
	got, err := r.DispensePlugin(csiNode, "my-plugin")
	require.NoError(t, err)
	return got.(*messages.PluginInfo)
}
