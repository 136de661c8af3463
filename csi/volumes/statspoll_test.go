package volumes_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/supervisor"
)

// manualClock is a supervisor.Clock whose timers fire when the test says.
type manualClock struct {
	mu      sync.Mutex
	pending []func()
}

func (c *manualClock) Now() time.Time { return time.Now() }

func (c *manualClock) AfterFunc(_ time.Duration, f func()) supervisor.Stopper {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending = append(c.pending, f)
	return stopper{}
}

// fire runs every timer armed so far.
func (c *manualClock) fire() {
	c.mu.Lock()
	due := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

type stopper struct{}

func (stopper) Stop() bool { return true }

// withStats restarts f's manager with periodic stats on a manual clock;
// supported is what it learns of the plugin's GET_VOLUME_STATS, and asked
// counts how often it asked.
func withStats(f *expandFixture, heard *fenceEvents, supported bool) (*manualClock, *atomic.Int32) {
	clock, asked := &manualClock{}, &atomic.Int32{}
	f.n.restartWith(func(c *volumes.Config) {
		c.Clock, c.StatsInterval, c.OnEvent = clock, time.Minute, heard.add
		c.StatsSupported = func(plugin string) bool {
			asked.Add(1)
			return supported && plugin == "mock"
		}
	})
	return clock, asked
}

// TestPeriodicStatsSampleAPublishedVolumeAndRecordEachChangeOfItsCondition
// fires rounds of the periodic stats: each answer becomes the volume's
// sample, a change of condition is recorded in the record and told as an
// event (abnormal, then normal), the volume's last operation stays its
// mount, and the sample is gone once the volume is unmounted.
func TestPeriodicStatsSampleAPublishedVolumeAndRecordEachChangeOfItsCondition(t *testing.T) {
	heard := &fenceEvents{}
	f := newExpandFixture(t, statsCap)
	clock, _ := withStats(f, heard, true)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil))...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)

	var abnormal atomic.Bool
	f.m.nodeCapsWith(statsCap).AnyTimes()
	f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).DoAndReturn(
		func(context.Context, *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
			return withCondition(&csipb.NodeGetVolumeStatsResponse{Usage: usage()}, abnormal.Load(), "disk degraded"), nil
		}).AnyTimes()
	round := func(wantCondition string) volumes.StatsSample {
		t.Helper()
		clock.fire()
		var sample volumes.StatsSample
		require.Eventually(t, func() bool {
			samples := f.n.manager.VolumeStats()
			if len(samples) != 1 || samples[0].Abnormal != (wantCondition != "") {
				return false
			}
			sample = samples[0]
			st := f.n.status("vol")
			return !st.Busy && st.Record.GetCondition() == wantCondition
		}, wait, 5*time.Millisecond)
		return sample
	}

	abnormal.Store(true)
	sample := round("disk degraded")
	require.Equal(t, volumes.StatsSample{Namespace: "default", VolumeID: "vol", PluginID: "mock",
		Usage: sample.Usage, ConditionKnown: true, Abnormal: true}, sample)
	require.Len(t, sample.Usage, 2)
	require.Equal(t, int64(1000), sample.Usage[0].GetTotal())
	abnormal.Store(false)
	round("")
	require.Equal(t, []volumes.EventKind{volumes.EventConditionAbnormal, volumes.EventConditionNormal}, heard.kinds("web-1"))
	require.Equal(t, "mount web-1", f.n.status("vol").LastOperation, "recording a condition is no operation of the volume")

	f.m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil)
	f.m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil)
	require.NoError(t, f.n.manager.Unmount(ctx, "", "vol", "web-1"))
	require.Empty(t, f.n.manager.VolumeStats(), "an unpublished volume's series are removed")
}

// TestPeriodicStatsSendNoRPCToAPluginWithoutGetVolumeStats fires rounds
// for a volume whose node plugin does not advertise GET_VOLUME_STATS: the
// rounds run (the capability is looked up) and send no RPC at all (the
// strict mock expects none: neither NodeGetCapabilities nor
// NodeGetVolumeStats), and no sample appears.
func TestPeriodicStatsSendNoRPCToAPluginWithoutGetVolumeStats(t *testing.T) {
	f := newExpandFixture(t)
	clock, asked := withStats(f, &fenceEvents{}, false)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil),
		f.m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		f.m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
	)...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	for i := int32(1); i <= 3; i++ {
		clock.fire()
		require.Eventually(t, func() bool { return asked.Load() >= i }, wait, time.Millisecond)
	}
	require.Empty(t, f.n.manager.VolumeStats())
	// An unmount sends its RPCs after any a round would have sent.
	require.NoError(t, f.n.manager.Unmount(ctx, "", "vol", "web-1"))
}

// TestABadStatsConfigIsRefusedNamingTheField: a negative interval or
// concurrency is refused before anything starts.
func TestABadStatsConfigIsRefusedNamingTheField(t *testing.T) {
	n := newNode(t, nil)
	for field, tune := range map[string]func(*volumes.Config){
		"StatsInterval":    func(c *volumes.Config) { c.StatsInterval = -time.Second },
		"StatsConcurrency": func(c *volumes.Config) { c.StatsConcurrency = -1 },
	} {
		bucket, err := storage.NewMemory().Bucket(volumes.Bucket)
		require.NoError(t, err)
		cfg := n.cfg
		cfg.Bucket, cfg.Name = bucket, "other"
		tune(&cfg)
		_, err = volumes.Start(n.system, cfg)
		require.ErrorIs(t, err, volumes.ErrInvalid)
		require.ErrorContains(t, err, field)
	}
}

// TestPeriodicStatsKeepAtMostStatsConcurrencyRPCsInFlight mounts three
// volumes and answers no stats RPC until two are in flight: with
// StatsConcurrency 2 the third waits for one of them to answer, and every
// volume gets its sample.
func TestPeriodicStatsKeepAtMostStatsConcurrencyRPCsInFlight(t *testing.T) {
	f := newExpandFixture(t, statsCap)
	clock, _ := withStats(f, &fenceEvents{}, true)
	f.n.restartWith(func(c *volumes.Config) { c.StatsConcurrency = 2 })
	for _, id := range []string{"vol2", "vol3"} {
		f.n.catalog.add(id, "ext-"+id, "mock", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	}
	f.m.nodeCapsWith(statsCap).AnyTimes()
	f.m.controllerCaps().AnyTimes()
	f.m.Node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeStageVolumeResponse{}, nil).AnyTimes()
	f.publish(nil).AnyTimes()
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).DoAndReturn(
		func(ctx context.Context, _ *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &csipb.NodeGetVolumeStatsResponse{Usage: usage()}, nil
		}).AnyTimes()
	for _, id := range []string{"vol", "vol2", "vol3"} {
		_, err := f.n.manager.Mount(ctx, "", id, "web-1", false)
		require.NoError(t, err)
	}
	clock.fire()
	require.Eventually(t, func() bool { return inFlight.Load() == 2 }, wait, time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return len(f.n.manager.VolumeStats()) == 3 }, wait, 5*time.Millisecond)
	require.Equal(t, int32(2), most.Load(), "never more than StatsConcurrency RPCs at once")
	f.n.stop() // the volumes stay published; the mocks expect nothing more
}
