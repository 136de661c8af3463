package hostpath_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plugvisor/plugvisor/csi/hostpath"
)

// TestNodeRPCsOfOtherVolumesRunWhileOneVolumeIsBusy holds one volume's lock,
// as a slow node RPC on it would: another volume stages, publishes,
// unpublishes and unstages meanwhile, and the busy volume's staging waits
// until its lock is released, then succeeds.
func TestNodeRPCsOfOtherVolumesRunWhileOneVolumeIsBusy(t *testing.T) {
	p := serve(t, config(t))
	busy, free := p.create(t, "busy"), p.create(t, "free")
	unlock := hostpath.LockVolume(p.srv.Driver, busy)
	staged := make(chan error, 1)
	go func() {
		_, err := p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: busy, StagingTargetPath: p.path("busy"), VolumeCapability: writer})
		staged <- err
	}()

	p.stage(t, free, p.path("free"))
	_, err := p.node.NodePublishVolume(t.Context(), publishReq(free, p.path("free"), p.path("target"), false))
	require.NoError(t, err)
	p.unpublish(t, free, p.path("target"))
	p.unstage(t, free, p.path("free"))
	select {
	case err := <-staged:
		t.Fatalf("the busy volume was staged while its lock was held: %v", err)
	default:
	}

	unlock()
	select {
	case err := <-staged:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the busy volume's staging did not end after its lock was released")
	}
	p.unstage(t, busy, p.path("busy"))
}

// TestConcurrentStagingsKeepMaxVolumes stages ten volumes at once on a node
// limited to three: exactly three succeed and the others are refused with
// ResourceExhausted.
func TestConcurrentStagingsKeepMaxVolumes(t *testing.T) {
	cfg := config(t)
	cfg.MaxVolumes = 3
	p := serve(t, cfg)
	ids := make([]string, 10)
	for i := range ids {
		ids[i] = p.create(t, fmt.Sprintf("v%d", i))
	}
	codesSeen := make([]codes.Code, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, err := p.node.NodeStageVolume(t.Context(), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: p.path(fmt.Sprintf("s%d", i)), VolumeCapability: writer})
			codesSeen[i] = status.Code(err)
		})
	}
	wg.Wait()
	count := map[codes.Code]int{}
	for _, c := range codesSeen {
		count[c]++
	}
	require.Equal(t, map[codes.Code]int{codes.OK: 3, codes.ResourceExhausted: 7}, count)
	for i, id := range ids {
		if codesSeen[i] == codes.OK {
			p.unstage(t, id, p.path(fmt.Sprintf("s%d", i)))
		}
	}
}
