package volumes_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// heldClaims is a catalog whose claims, once held is set, wait until it
// is cleared, then fail: an operation on the volume that waits for the
// fleet as long as the test says.
type heldClaims struct {
	*modelCatalog
	held     atomic.Bool
	released chan struct{}
}

func (c *heldClaims) ClaimVolume(ctx context.Context, req csi.ClaimRequest) (*model.CSIVolume, error) {
	if c.held.Load() {
		select {
		case <-c.released:
		case <-ctx.Done():
		}
		return nil, errors.New("the fleet did not answer")
	}
	return c.modelCatalog.ClaimVolume(ctx, req)
}

// TestAResyncMakesAWriterWithoutItsClaimReadOnlyWhileItsVolumeIsBusy: a
// writer's claim is freed behind the node's back (a restore of etcd, say)
// while a mount of another alloc of the same volume waits for the fleet.
// The node's watch asks for a resync: the writer's target is read-only
// at once, not once the waiting mount has ended and the volume's
// reconcile has run, and the reconcile then takes it down. Before, the
// writer stayed writable without its claim for as long as the mount waited
// (a chaos run: 8.2 s, past the fence's bound).
func TestAResyncMakesAWriterWithoutItsClaimReadOnlyWhileItsVolumeIsBusy(t *testing.T) {
	catalog := &heldClaims{released: make(chan struct{})}
	n := newNode(t, func(c *volumes.Config) {
		catalog.modelCatalog = c.Catalog.(*modelCatalog)
		c.Catalog = catalog
	})
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "vol", "hp", model.AccessModeMultiNodeMultiWriter)
	target := n.mount("vol", "web-1").TargetPath
	require.False(t, readOnly(target))

	catalog.held.Store(true)
	waiting := make(chan error, 1)
	go func() {
		_, err := n.manager.Mount(ctx, "", "vol", "web-2", false)
		waiting <- err
	}()
	require.Eventually(t, func() bool { return n.status("vol").Busy }, wait, 5*time.Millisecond, "the second mount waits for the fleet")
	_, err := catalog.modelCatalog.ReleaseVolume(ctx, "default", "vol", &model.Claim{AllocID: "web-1", State: model.ClaimStateReadyToFree})
	require.NoError(t, err)

	n.manager.Resync("etcd restored")
	require.Eventually(t, func() bool { return readOnly(target) }, 5*time.Second, 10*time.Millisecond,
		"the writer without its claim is read-only while the volume is busy")
	require.True(t, n.status("vol").Busy, "the second mount still waits")

	close(catalog.released)
	require.Error(t, <-waiting)
	require.Eventually(t, func() bool { return len(n.status("vol").Record.GetPublishes()) == 0 }, wait, 10*time.Millisecond,
		"the reconcile took the writer down")
	require.Empty(t, mountsUnder(t, n.root))
}
