package hostpath_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

func TestCreateVolumeIsIdempotent(t *testing.T) {
	p := serve(t, config(t))
	first, err := p.ctrl.CreateVolume(t.Context(), createReq("data", 1<<20))
	require.NoError(t, err)
	again, err := p.ctrl.CreateVolume(t.Context(), createReq("data", 1<<20))
	require.NoError(t, err)
	require.Equal(t, first.GetVolume().GetVolumeId(), again.GetVolume().GetVolumeId())
	require.EqualValues(t, 1<<20, again.GetVolume().GetCapacityBytes())
	require.Equal(t, map[string]string{hostpath.TopologyKey: "node-1"}, again.GetVolume().GetAccessibleTopology()[0].GetSegments())

	_, err = p.ctrl.CreateVolume(t.Context(), createReq("data", 2<<20))
	requireCode(t, codes.AlreadyExists, err)
	withParams := createReq("data", 1<<20)
	withParams.Parameters = map[string]string{"tier": "fast"}
	_, err = p.ctrl.CreateVolume(t.Context(), withParams)
	requireCode(t, codes.AlreadyExists, err)

	list, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)

	id := first.GetVolume().GetVolumeId()
	p.delete(t, id)
	p.delete(t, id)
	dir, err := p.srv.Driver.VolumePath(id)
	require.NoError(t, err)
	require.NoDirExists(t, dir)
}

func TestValidateVolumeCapabilities(t *testing.T) {
	p := serve(t, config(t))
	id := p.create(t, "v")
	tests := []struct {
		name      string
		caps      []*csi.VolumeCapability
		params    map[string]string
		confirmed bool
		message   string
	}{
		{name: "single node writer mount", caps: []*csi.VolumeCapability{writer}, confirmed: true},
		{name: "block access type", caps: []*csi.VolumeCapability{blockCap()}, message: "only the mount access type"},
		{name: "multi node access mode", caps: []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, message: "only single-node modes"},
		{name: "parameters the volume was not created with", caps: []*csi.VolumeCapability{writer}, params: map[string]string{"tier": "fast"}, message: "has parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := p.ctrl.ValidateVolumeCapabilities(t.Context(), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: tt.caps, Parameters: tt.params})
			require.NoError(t, err)
			require.Equal(t, tt.confirmed, resp.GetConfirmed() != nil)
			require.Contains(t, resp.GetMessage(), tt.message)
		})
	}
}

func TestListVolumesPages(t *testing.T) {
	p := serve(t, config(t))
	var want []string
	for i := range 5 {
		want = append(want, p.create(t, fmt.Sprintf("v%d", i)))
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		resp, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		require.NoError(t, err)
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
		// Deleting the volume the token names loses nothing.
		p.delete(t, token)
		want = slices.DeleteFunc(want, func(id string) bool { return id == token })
	}
	require.ElementsMatch(t, want, got)
}

// TestNodeLifecycleIsIdempotent repeats every node RPC and checks the
// conflicts the CSI spec names.
func TestNodeLifecycleIsIdempotent(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	target := p.path("target")
	p.stage(t, id, staging)
	for range 2 {
		_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, false))
		require.NoError(t, err)
	}
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(id, staging, target, true))
	requireCode(t, codes.AlreadyExists, err)

	stats, err := p.node.NodeGetVolumeStats(t.Context(), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	require.NoError(t, err)
	require.Len(t, stats.GetUsage(), 2)

	_, err = p.node.NodeUnstageVolume(t.Context(), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	requireCode(t, codes.FailedPrecondition, err)

	p.unpublish(t, id, target)
	p.unpublish(t, id, target)
	require.NoFileExists(t, target)
	require.NoDirExists(t, target)
	p.unstage(t, id, staging)
	p.unstage(t, id, staging)
	require.DirExists(t, staging, "the staging directory belongs to the CO")
	p.delete(t, id)
	p.delete(t, id)
}

func TestSingleWriterVolumeHasOneTarget(t *testing.T) {
	p, id, staging := stagedVolume(t, config(t))
	req := publishReq(id, staging, p.path("one"), false)
	req.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)
	_, err := p.node.NodePublishVolume(t.Context(), req)
	require.NoError(t, err)

	req.TargetPath = p.path("two")
	_, err = p.node.NodePublishVolume(t.Context(), req)
	requireCode(t, codes.FailedPrecondition, err)
	require.NoDirExists(t, p.path("two"), "a refused publication leaves no target")
	p.unpublish(t, id, p.path("one"))
}

func TestMaxVolumesLimitsStaging(t *testing.T) {
	cfg := config(t)
	cfg.MaxVolumes = 1
	p := serve(t, cfg)
	info, err := p.node.NodeGetInfo(t.Context(), &csi.NodeGetInfoRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 1, info.GetMaxVolumesPerNode())

	a, b := p.create(t, "a"), p.create(t, "b")
	p.stage(t, a, p.path("a"))
	_, err = p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: b, StagingTargetPath: p.path("b"), VolumeCapability: writer})
	requireCode(t, codes.ResourceExhausted, err)
}

// TestStateSurvivesANewDriver serves a second driver on the same root, as a
// restarted plugin would be: it knows the volumes and stagings of the first.
func TestStateSurvivesANewDriver(t *testing.T) {
	cfg := config(t)
	first := serve(t, cfg)
	id := first.create(t, "v")
	staging := first.path("staging")
	first.stage(t, id, staging)

	second := serve(t, cfg)
	resp, err := second.ctrl.CreateVolume(t.Context(), createReq("v", 1<<20))
	require.NoError(t, err)
	require.Equal(t, id, resp.GetVolume().GetVolumeId())
	_, err = second.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: first.path("elsewhere"), VolumeCapability: writer})
	requireCode(t, codes.FailedPrecondition, err)
	second.unstage(t, id, staging)
}

// TestConcurrentRPCs runs the whole lifecycle of many volumes at once, with
// every volume also created by two callers racing each other.
func TestConcurrentRPCs(t *testing.T) {
	p := serve(t, config(t))
	const volumes = 8
	ids := make([][2]string, volumes)
	var wg sync.WaitGroup
	for i := range volumes {
		for racer := range 2 {
			wg.Go(func() {
				resp, err := p.ctrl.CreateVolume(context.Background(), createReq(fmt.Sprintf("v%d", i), 1<<20))
				if err == nil {
					ids[i][racer] = resp.GetVolume().GetVolumeId()
				}
			})
		}
	}
	wg.Wait()
	for i := range volumes {
		require.NotEmpty(t, ids[i][0])
		require.Equal(t, ids[i][0], ids[i][1], "racing creators of one name get one volume")
	}
	errs := make(chan error, volumes)
	for i := range volumes {
		wg.Go(func() { errs <- lifecycle(p, ids[i][0], i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	list, err := p.ctrl.ListVolumes(t.Context(), &csi.ListVolumesRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetEntries())
}

// lifecycle stages, publishes, unpublishes, unstages and deletes a volume.
func lifecycle(p *plugin, id string, i int) error {
	ctx := context.Background()
	staging, target := p.path(fmt.Sprintf("staging%d", i)), p.path(fmt.Sprintf("target%d", i))
	steps := []func() error{
		func() error {
			return call(p.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: writer}))
		},
		func() error { return call(p.node.NodePublishVolume(ctx, publishReq(id, staging, target, false))) },
		func() error {
			return call(p.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}))
		},
		func() error {
			return call(p.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}))
		},
		func() error { return call(p.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("volume %s: %w", id, err)
		}
	}
	return nil
}
