package registry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// gatedBucket holds every Apply until the test lets it through, so that
// the commands sent meanwhile queue up for the next batch.
type gatedBucket struct {
	storage.Bucket
	entered chan struct{}
	gate    chan struct{}
}

func (b *gatedBucket) Apply(ops []storage.Op) error {
	b.entered <- struct{}{}
	<-b.gate
	return b.Bucket.Apply(ops)
}

// batchSizes records the size of every batch the registry writes.
type batchSizes struct {
	registry.Metrics
	sizes chan int
}

func (m *batchSizes) Batch(n int) { m.sizes <- n }

type nopMetrics struct{}

func (nopMetrics) Write(string, error, time.Duration) {}
func (nopMetrics) Batch(int)                          {}
func (nopMetrics) EventsSent(int)                     {}
func (nopMetrics) Subscribers(int)                    {}

func TestABatchWithOneInvalidCommandAnswersItAndAppliesTheRest(t *testing.T) {
	system := probe.NewSystem(t)
	bucket := &gatedBucket{Bucket: memoryBucket(t), entered: make(chan struct{}, 8), gate: make(chan struct{})}
	metrics := &batchSizes{Metrics: nopMetrics{}, sizes: make(chan int, 8)}
	r, err := registry.New(system, registry.Config{Bucket: bucket, Metrics: metrics, Logger: probe.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { close(bucket.gate); require.NoError(t, r.Shutdown()) })
	events := probe.New(t, system)
	subscribe(t, r, events, csiNode, false)

	// A first write holds the store, so the commands below queue up
	// behind it and go to disk as one batch.
	first := make(chan error, 1)
	go func() { first <- r.RegisterPlugin(pluginNamed("first", 0)) }()
	<-bucket.entered
	require.Equal(t, 1, <-metrics.sizes)

	caller := probe.New(t, system)
	bad := pluginNamed("", 1) // no name: bad on its face
	caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: pluginNamed("a", 1), ReplyTo: caller.PID()})
	caller.Send(r.PID(), &messages.DeregisterPlugin{Type: csiNode, Name: "never", AllocId: "alloc-9", ReplyTo: caller.PID()})
	caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: bad, ReplyTo: caller.PID()})
	caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: pluginNamed("b", 2), ReplyTo: caller.PID()})

	// The command bad on its face is answered at once, before the batch
	// is written.
	refused := probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout)
	require.ErrorIs(t, messages.ErrorFromProto(refused.GetError()), registry.ErrInvalid)
	require.ErrorContains(t, messages.ErrorFromProto(refused.GetError()), "name")

	bucket.gate <- struct{}{} // the first batch
	require.NoError(t, <-first)
	<-bucket.entered
	require.Equal(t, 3, <-metrics.sizes, "a, the unknown deregistration and b share one batch")
	bucket.gate <- struct{}{}

	require.NoError(t, messages.ErrorFromProto(probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout).GetError()))
	missing := probe.Expect[*messages.DeregisterPluginResponse](t, caller, timeout)
	require.ErrorIs(t, messages.ErrorFromProto(missing.GetError()), registry.ErrNotFound)
	require.NoError(t, messages.ErrorFromProto(probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout).GetError()))

	got := []string{}
	for range 3 {
		got = append(got, probe.Expect[*messages.PluginRegistered](t, events, timeout).GetPlugin().GetName())
	}
	require.Equal(t, []string{"first", "a", "b"}, got, "the rest of the batch was applied, in order")
	require.Equal(t, []string{"a", "b", "first"}, each(r.ListPlugins(csiNode), (*messages.PluginInfo).GetName))
}

func TestDeregisteringAMissingAllocation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		isNil bool
	}{
		{"is ErrNotFound by default", false},
		{"is nil when configured as Nomad's is", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			system := probe.NewSystem(t)
			r, err := registry.New(system, registry.Config{Bucket: memoryBucket(t), DeregisterMissingIsNil: tc.isNil})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
			p := probe.New(t, system)
			subscribe(t, r, p, "", false)
			require.NoError(t, r.RegisterPlugin(plugin(0)))
			probe.Expect[*messages.PluginRegistered](t, p, timeout)
			before := r.Snapshot()

			err = r.DeregisterPlugin(csiNode, "my-plugin", "alloc-7")
			if tc.isNil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, registry.ErrNotFound)
			}
			require.ErrorIs(t, r.DeregisterPlugin(csiNode, "my-plugin", ""), registry.ErrInvalid,
				"bad input is refused either way")
			p.ExpectNone(t, 20*time.Millisecond)
			require.Same(t, before, r.Snapshot(), "nothing changed")
		})
	}
}

func TestListingGivesTheNewestAllocationOfEachNameWhateverItsOlderOnes(t *testing.T) {
	r, _ := newRegistry(t)
	for _, name := range []string{"b", "aa", "a"} {
		for i := range 3 {
			require.NoError(t, r.RegisterPlugin(pluginNamed(name, i)))
		}
	}
	require.NoError(t, r.DeregisterPlugin(csiNode, "aa", "alloc-2"))
	got := r.ListPlugins(csiNode)
	require.Equal(t, []string{"a", "aa", "b"}, each(got, (*messages.PluginInfo).GetName))
	require.Equal(t, []string{"alloc-2", "alloc-1", "alloc-2"}, allocIDs(got))
	require.Empty(t, r.ListPlugins("docker-volume"))
	require.NotNil(t, r.ListPlugins("docker-volume"), "an empty list, not nil")
}

// writeTimes records the time each answered write took.
type writeTimes struct {
	nopMetrics
	took chan time.Duration
}

func (m *writeTimes) Write(_ string, _ error, took time.Duration) { m.took <- took }

// TestMetricsGetTheTimeFromArrivalToAnswerOfEachWrite: a registry with
// metrics gives each answered write the time it took, in memory and on
// disk.
func TestMetricsGetTheTimeFromArrivalToAnswerOfEachWrite(t *testing.T) {
	for _, memory := range []bool{true, false} {
		system := probe.NewSystem(t)
		metrics := &writeTimes{took: make(chan time.Duration, 4)}
		cfg := registry.Config{Metrics: metrics, Logger: probe.Logger(t)}
		if memory {
			cfg.Memory = registry.NewMemoryStore()
		} else {
			cfg.Bucket = memoryBucket(t)
		}
		r, err := registry.New(system, cfg)
		require.NoError(t, err)
		require.NoError(t, r.RegisterPlugin(pluginNamed("timed", 0)))
		require.NoError(t, r.Shutdown())
		select {
		case took := <-metrics.took: // measured before the answer
			require.Positive(t, took, "memory %v: the write's time", memory)
		default:
			t.Fatalf("memory %v: the answered write was not measured", memory)
		}
	}
}
