package volumes_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// unansweredReleases is a catalog whose releases fail as a fleet's do
// when etcd does not answer, while failing is set.
type unansweredReleases struct {
	*modelCatalog
	failing atomic.Bool
}

func (c *unansweredReleases) ReleaseVolume(ctx context.Context, ns, id string, r *model.Claim) (*model.CSIVolume, error) {
	if c.failing.Load() {
		return nil, model.Refusef(model.ErrFleetUnavailable, "etcd did not answer; read back, it was not applied")
	}
	return c.modelCatalog.ReleaseVolume(ctx, ns, id, r)
}

// TestAnUnmountWhoseReleaseFailsSaysTheMountIsDown: the catalog does not
// take the release of the claim a mount made, after the target and the
// staging path are unmounted. The unmount fails as the catalog's error
// says (503), and its words say that the mount is down and only the
// release is left, so that a caller does not take the answer for a mount
// still up. The claim is kept until the release goes through, and an
// unmount sent again finishes the way out (a forced one too).
func TestAnUnmountWhoseReleaseFailsSaysTheMountIsDown(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(map[bool]string{false: "unmount", true: "unmount -force"}[force], func(t *testing.T) {
			var catalog *unansweredReleases
			n := newNode(t, func(c *volumes.Config) {
				catalog = &unansweredReleases{modelCatalog: c.Catalog.(*modelCatalog)}
				c.Catalog = catalog
			})
			p := newStrictPlugin(t, n, "hp")
			p.create(n, "vol", "hp", model.AccessModeSingleNodeWriter)
			n.mount("vol", "web-1")
			unmount := n.manager.Unmount
			if force {
				unmount = n.manager.ForceUnmount
			}

			catalog.failing.Store(true)
			err := unmount(ctx, "", "vol", "web-1")
			require.ErrorIs(t, err, model.ErrFleetUnavailable)
			require.ErrorContains(t, err, "the mount of volume default/vol by alloc web-1 is down")
			require.ErrorContains(t, err, "its claim is not released yet")
			require.ErrorContains(t, err, "it was not applied", "the catalog's words")
			require.Empty(t, mountsUnder(t, n.root), "the target and the staging path are unmounted")
			writers, _, _ := catalog.claims("vol")
			require.Equal(t, []string{"web-1"}, writers, "the claim stays until its release goes through")

			catalog.failing.Store(false)
			require.NoError(t, unmount(ctx, "", "vol", "web-1"), "the unmount sent again finishes the way out")
			require.Nil(t, n.settle("vol").Record)
			n.requireNoWriter("vol", "the claim is released")
		})
	}
}
