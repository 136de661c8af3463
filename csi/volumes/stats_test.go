package volumes_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi/csitest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/supervisor"
)

const statsCap = csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS

// withCondition sets the volume_condition field (2) of resp, as a plugin
// built with a spec that declares it sends it.
func withCondition(resp *csipb.NodeGetVolumeStatsResponse, abnormal bool, message string) *csipb.NodeGetVolumeStatsResponse {
	inner := protowire.AppendTag(nil, 1, protowire.VarintType)
	inner = protowire.AppendVarint(inner, protowire.EncodeBool(abnormal))
	inner = protowire.AppendTag(inner, 2, protowire.BytesType)
	inner = protowire.AppendString(inner, message)
	b := protowire.AppendTag(nil, 2, protowire.BytesType)
	resp.ProtoReflect().SetUnknown(protowire.AppendBytes(b, inner))
	return resp
}

func usage() []*csipb.VolumeUsage {
	return []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Available: 700, Total: 1000, Used: 300},
		{Unit: csipb.VolumeUsage_INODES, Available: 90, Total: 100, Used: 10},
	}
}

// TestTheStatusOfAPublishedVolumeCarriesTheNodePluginsStats checks the
// exact NodeGetVolumeStats request and the stats the status reports,
// condition included.
func TestTheStatusOfAPublishedVolumeCarriesTheNodePluginsStats(t *testing.T) {
	f := newExpandFixture(t, statsCap)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil),
		f.m.nodeCapsWith(statsCap),
		f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), csitest.ProtoEq(&csipb.NodeGetVolumeStatsRequest{
			VolumeId: "ext-vol", VolumePath: f.target, StagingTargetPath: f.staging,
		})).Return(withCondition(&csipb.NodeGetVolumeStatsResponse{Usage: usage()}, true, "disk degraded"), nil),
	)...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	st := f.n.status("vol")
	require.Empty(t, st.StatsError)
	want := &messages.VolumeStats{VolumePath: f.target, Usage: []*messages.VolumeUsage{
		{Unit: "bytes", Available: 700, Total: 1000, Used: 300},
		{Unit: "inodes", Available: 90, Total: 100, Used: 10},
	}, Condition: &messages.VolumeCondition{Abnormal: true, Message: "disk degraded"}}
	require.True(t, proto.Equal(want, st.Stats), "got %v", st.Stats)
	f.n.stop() // the volume stays published; the mocks expect nothing more
}

// TestAHangingStatsRPCDelaysTheStatusByAtMostTheRPCTimeoutAndBlocksNoOperation
// lets NodeGetVolumeStats hang: the volume unmounts meanwhile, and the
// status answers once the RPC timeout ends it, with the stats error.
func TestAHangingStatsRPCDelaysTheStatusByAtMostTheRPCTimeoutAndBlocksNoOperation(t *testing.T) {
	f := newExpandFixture(t, statsCap)
	f.n.restartWith(func(c *volumes.Config) { c.RPCTimeout = 2 * time.Second })
	reached := make(chan struct{})
	gomock.InOrder(append(f.mountCalls(), f.publish(nil),
		f.m.nodeCapsWith(statsCap),
		f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).DoAndReturn(
			func(ctx context.Context, _ *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
				close(reached)
				<-ctx.Done()
				return nil, ctx.Err()
			}),
		f.m.Node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		f.m.Node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
	)...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)
	done := make(chan volumes.Status, 1)
	go func() {
		st, err := f.n.manager.Status(ctx, "default", "vol")
		if err != nil {
			st.StatsError = "status failed: " + err.Error()
		}
		done <- st
	}()
	<-reached
	require.NoError(t, f.n.manager.Unmount(ctx, "", "vol", "web-1"), "the hanging stats RPC holds no operation of the volume")
	st := <-done
	require.Nil(t, st.Stats)
	require.NotEmpty(t, st.StatsError)
	require.NotContains(t, st.StatsError, "status failed")
	require.Nil(t, f.n.status("vol").Record)
}

// TestTheStartReconcileRecordsAnAbnormalVolumeCondition restarts the
// manager with a published volume whose node plugin reports it abnormal,
// then normal, then unknown (NotFound), then cannot say: the record's
// condition follows, each change is an event, and none of it is a
// failure: the publish has no last error and the volume is settled (no
// retry is scheduled for it).
func TestTheStartReconcileRecordsAnAbnormalVolumeCondition(t *testing.T) {
	heard := &fenceEvents{}
	f := newExpandFixture(t, statsCap)
	gomock.InOrder(append(f.mountCalls(), f.publish(nil))...)
	_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
	require.NoError(t, err)

	// The kernel's mount table, as the restarted manager reads it: the
	// target is mounted, so the reconcile publishes nothing again.
	table := filepath.Join(t.TempDir(), "mountinfo")
	require.NoError(t, os.WriteFile(table, []byte("1 0 0:1 / "+f.target+" rw - tmpfs none rw\n"), 0o600))
	var answer atomic.Value
	f.m.nodeCapsWith(statsCap).AnyTimes()
	f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).DoAndReturn(
		func(context.Context, *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
			a := answer.Load().(func() (*csipb.NodeGetVolumeStatsResponse, error))
			return a()
		}).AnyTimes()
	restart := func(a func() (*csipb.NodeGetVolumeStatsResponse, error)) string {
		answer.Store(a)
		f.n.restartWith(func(c *volumes.Config) {
			c.MountInfoPath = table
			c.OnEvent = heard.add
			c.Retry = supervisor.Spec{InitialDelay: time.Hour, MaxDelay: time.Hour, Multiplier: 1}
		})
		st := f.n.settle("vol")
		require.Equal(t, "reconcile", st.LastOperation)
		require.Empty(t, st.LastError)
		pub := st.Record.GetPublishes()["web-1"]
		require.Equal(t, "published", pub.GetState())
		require.Empty(t, pub.GetLastError(), "a condition is not a failure of the publish")
		require.True(t, volumes.Settled(st.Record), "a condition never leaves the volume to be retried")
		return st.Record.GetCondition()
	}

	got := restart(func() (*csipb.NodeGetVolumeStatsResponse, error) {
		return withCondition(&csipb.NodeGetVolumeStatsResponse{Usage: usage()}, true, "disk gone"), nil
	})
	require.Equal(t, "disk gone", got)

	hostile := "disk \u202egone\n" + strings.Repeat("\xff", 3<<20)
	got = restart(func() (*csipb.NodeGetVolumeStatsResponse, error) {
		return withCondition(&csipb.NodeGetVolumeStatsResponse{Usage: usage()}, true, hostile), nil
	})
	require.Less(t, len(got), 1200, "a plugin's condition is cut at 1 KiB before the record, the events and the logs")
	require.True(t, utf8.ValidString(got))
	require.NotContains(t, got, "\u202e")
	require.NotContains(t, got, "\n")

	got = restart(func() (*csipb.NodeGetVolumeStatsResponse, error) {
		return withCondition(&csipb.NodeGetVolumeStatsResponse{Usage: usage()}, false, "fine"), nil
	})
	require.Empty(t, got, "a volume normal again clears the condition")

	got = restart(func() (*csipb.NodeGetVolumeStatsResponse, error) {
		return nil, status.Error(codes.NotFound, "no such volume at the path")
	})
	require.Contains(t, got, "no such volume at the path")

	got = restart(func() (*csipb.NodeGetVolumeStatsResponse, error) {
		return nil, status.Error(codes.Unavailable, "busy")
	})
	require.Contains(t, got, "no such volume at the path", "a plugin that cannot answer changes nothing")
	require.Equal(t, []volumes.EventKind{volumes.EventConditionAbnormal, volumes.EventConditionNormal, volumes.EventConditionAbnormal},
		heard.kinds("web-1"))
	f.n.stop() // the volume stays published; the mocks expect nothing more
}

// TestGarbageStatsAreAClearStatusLineAndNeverARetry: a driver answering
// NodeGetVolumeStats with negative numbers, an unknown unit or no usage at
// all gets a status line naming what is wrong, no stats, and the volume
// stays settled.
func TestGarbageStatsAreAClearStatusLineAndNeverARetry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		usage []*csipb.VolumeUsage
		want  string
	}{
		{"a negative number", []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_BYTES, Available: -1, Total: 1000, Used: 300}}, "negative"},
		{"an unknown unit", []*csipb.VolumeUsage{{Unit: csipb.VolumeUsage_UNKNOWN, Available: 1, Total: 2, Used: 1}}, "unit"},
		{"no usage", nil, "no usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newExpandFixture(t, statsCap)
			gomock.InOrder(append(f.mountCalls(), f.publish(nil),
				f.m.nodeCapsWith(statsCap),
				f.m.Node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetVolumeStatsResponse{Usage: tc.usage}, nil),
			)...)
			_, err := f.n.manager.Mount(ctx, "", "vol", "web-1", false)
			require.NoError(t, err)
			st := f.n.status("vol")
			require.Nil(t, st.Stats)
			require.Contains(t, st.StatsError, "NodeGetVolumeStats")
			require.Contains(t, st.StatsError, tc.want)
			require.True(t, volumes.Settled(st.Record))
			f.n.stop() // the volume stays published; the mocks expect nothing more
		})
	}
}
