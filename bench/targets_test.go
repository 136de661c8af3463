package bench_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/bench"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/registry/workload"
	"github.com/plugvisor/plugvisor/storage"
)

// closeTimeout bounds a target's teardown: a stalled Nomad registry is
// abandoned after it, so the benchmark binary always exits.
const closeTimeout = 5 * time.Second

// impl makes a fresh target of one implementation, torn down in
// b.Cleanup; durable targets write to a bbolt file with fsync.
type impl struct {
	name    string
	memory  func(b *testing.B) workload.Target
	durable func(b *testing.B) workload.Target
}

var impls = []impl{
	{name: "nomad", memory: nomadMemory, durable: nomadDurable},
	{name: "plugvisor", memory: plugvisorMemory, durable: plugvisorDurable},
}

// each runs fn as a sub-benchmark per implementation, Nomad first.
func each(b *testing.B, fn func(b *testing.B, im impl)) {
	for _, im := range impls {
		b.Run(im.name, func(b *testing.B) { fn(b, im) })
	}
}

func nomadTarget(b *testing.B, state *bench.BoltState) workload.Target {
	b.Helper()
	var n *bench.NomadTarget
	if state == nil {
		n = bench.NewNomad(nil) // in memory only, as Nomad's own tests run it
	} else {
		n = bench.NewNomad(state)
	}
	b.Cleanup(func() {
		if err := n.Close(closeTimeout); err != nil {
			b.Log(err)
		}
	})
	return n
}

func nomadMemory(b *testing.B) workload.Target { return nomadTarget(b, nil) }

func nomadDurable(b *testing.B) workload.Target {
	b.Helper()
	state, err := bench.OpenBoltState(filepath.Join(b.TempDir(), "client.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = state.Close() })
	return nomadTarget(b, state)
}

// newPlugvisor starts plugvisor's registry on bucket in an actor system of
// its own.
func newPlugvisor(b *testing.B, bucket storage.Bucket) (*actor.ActorSystem, *registry.Registry) {
	system, r, _ := newCountedPlugvisor(b, registry.Config{Bucket: bucket})
	return system, r
}

// newCountedPlugvisor starts plugvisor's registry with cfg's store in an
// actor system of its own, with a counter of the registry's batches.
func newCountedPlugvisor(b *testing.B, cfg registry.Config) (*actor.ActorSystem, *registry.Registry, *workload.BatchCounter) {
	b.Helper()
	system := probe.NewSystem(b)
	counter := &workload.BatchCounter{}
	cfg.Metrics = counter
	cfg.Dispensers = map[string]registry.Dispenser{workload.PluginType: func(*messages.PluginInfo) (any, error) { return nil, nil }}
	// Nomad has no limit: BenchmarkScale fills both with 100,000 plugins.
	cfg.Limits.PluginsPerType = 1 << 20
	r, err := registry.New(system, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Shutdown() })
	return system, r, counter
}

// plugvisorMemory keeps the registry in memory (registry.MemoryStore), as
// Nomad's in-memory registry keeps its own.
func plugvisorMemory(b *testing.B) workload.Target {
	return workload.PlugvisorCounting(newCountedPlugvisor(b, registry.Config{Memory: registry.NewMemoryStore()}))
}

// plugvisorChannels is plugvisorMemory with channel subscribers.
func plugvisorChannels(b *testing.B) workload.Target {
	return workload.PlugvisorChannels(newCountedPlugvisor(b, registry.Config{Memory: registry.NewMemoryStore()}))
}

// plugvisorBucket keeps the registry on a storage.Memory bucket
// (Config.Bucket): the records encoded and committed by the store's
// goroutine, as with bbolt, without a disk.
func plugvisorBucket(b *testing.B) workload.Target {
	b.Helper()
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	if err != nil {
		b.Fatal(err)
	}
	return workload.PlugvisorCounting(newCountedPlugvisor(b, registry.Config{Bucket: bucket}))
}

func plugvisorDurable(b *testing.B) workload.Target {
	b.Helper()
	db, err := storage.OpenBolt(filepath.Join(b.TempDir(), "state.db"), storage.BoltOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	bucket, err := db.Bucket(registry.BucketName)
	if err != nil {
		b.Fatal(err)
	}
	return workload.PlugvisorCounting(newCountedPlugvisor(b, registry.Config{Bucket: bucket}))
}
