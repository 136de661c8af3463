package fleet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
)

// withExternal is volume id holding plugin volume external.
func withExternal(id, external string) *model.CSIVolume {
	v := volume(id, model.AccessModeMultiNodeReader)
	v.ExternalID = external
	return v
}

// TestAPluginVolumeIsHeldByOneVolumeAcrossDeregistrationAndRedescription
// moves plugin volumes between catalog volumes: the index entry follows
// each registration, new description and deregistration.
func TestAPluginVolumeIsHeldByOneVolumeAcrossDeregistrationAndRedescription(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv, "node-a")
	ctx := testCtx(t)
	registered(t, s, withExternal("a", "disk-1"))
	_, err := s.RegisterVolume(ctx, withExternal("b", "disk-1"))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.ErrorContains(t, err, `already catalog volume "a"`)

	require.NoError(t, s.DeregisterVolume(ctx, "", "a"))
	registered(t, s, withExternal("b", "disk-1"))

	registered(t, s, withExternal("c", "disk/2"))
	registered(t, s, withExternal("c", "disk-3"))
	registered(t, s, withExternal("d", "disk/2"))
	_, err = s.RegisterVolume(ctx, withExternal("e", "disk-3"))
	require.ErrorIs(t, err, model.ErrVolumeConflict, "a new description takes its new plugin volume")
	require.ErrorContains(t, err, `already catalog volume "c"`)
	other := withExternal("e", "disk-3")
	other.PluginID = "nfs"
	registered(t, s, other) // the same ID at another plugin is another plugin volume
}

// TestTheCountFollowsDeregistrationsAtTheLimit fills a fleet of 2, frees
// one place and fills it again.
func TestTheCountFollowsDeregistrationsAtTheLimit(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv, "node-a", func(c *fleet.Config) { c.MaxVolumes = 2 })
	ctx := testCtx(t)
	registered(t, s, volume("a", model.AccessModeMultiNodeReader))
	registered(t, s, volume("b", model.AccessModeMultiNodeReader))
	registered(t, s, volume("b", model.AccessModeMultiNodeMultiWriter)) // a new description counts once
	_, err := s.RegisterVolume(ctx, volume("c", model.AccessModeMultiNodeReader))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorIs(t, s.CheckRoom(ctx, "", "c"), model.ErrVolumeLimit)

	require.NoError(t, s.DeregisterVolume(ctx, "", "a"))
	require.NoError(t, s.CheckRoom(ctx, "", "c"))
	registered(t, s, volume("c", model.AccessModeMultiNodeReader))
	_, err = s.RegisterVolume(ctx, volume("d", model.AccessModeMultiNodeReader))
	require.ErrorIs(t, err, model.ErrVolumeLimit)
	require.ErrorContains(t, err, "holds 2 volumes")
}

// TestAFleetWrittenWithoutTheIndexesGetsThemAtOpen removes the index keys
// of a fleet, as a fleet written before them has none, and opens a node:
// the conflicts and the limit hold again over the volumes already there.
func TestAFleetWrittenWithoutTheIndexesGetsThemAtOpen(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := testCtx(t)
	first := open(t, srv, "node-a")
	for i := range 3 {
		registered(t, first, withExternal(fmt.Sprintf("v-%d", i), fmt.Sprintf("disk-%d", i)))
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: timeout})
	require.NoError(t, err)
	defer client.Close()
	for _, prefix := range []string{fleet.DefaultPrefix + "pluginvolumes/", fleet.DefaultPrefix + "volumecount"} {
		_, err := client.Delete(ctx, prefix, clientv3.WithPrefix())
		require.NoError(t, err)
	}

	s := open(t, srv, "node-b", func(c *fleet.Config) { c.MaxVolumes = 4 })
	_, err = s.RegisterVolume(ctx, withExternal("w", "disk-1"))
	require.ErrorIs(t, err, model.ErrVolumeConflict)
	require.ErrorContains(t, err, `already catalog volume "v-1"`)
	registered(t, s, withExternal("w", "disk-9"))
	_, err = s.RegisterVolume(ctx, withExternal("x", "disk-10"))
	require.ErrorIs(t, err, model.ErrVolumeLimit, "the 3 volumes there before count")
	require.ErrorContains(t, err, "holds 4 volumes")
}

// TestConcurrentRegistrationsWaitTheirTurnAndNeverSayEtcdIsAway has 8
// callers on 2 nodes register new volumes at once, every one of them
// writing the volume count: all succeed. With one attempt allowed, the
// losers say they lost the race, never that etcd did not answer.
func TestConcurrentRegistrationsWaitTheirTurnAndNeverSayEtcdIsAway(t *testing.T) {
	srv := etcdtest.Start(t)
	register := func(stores []*fleet.Store, prefix string) []error {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = stores[i%2].RegisterVolume(context.Background(), volume(fmt.Sprintf("%s-%d", prefix, i), model.AccessModeMultiNodeReader))
			})
		}
		wg.Wait()
		return errs
	}
	patient := []*fleet.Store{open(t, srv, "node-a"), open(t, srv, "node-b")}
	for i := range 3 {
		for _, err := range register(patient, fmt.Sprintf("round-%d", i)) {
			require.NoError(t, err)
		}
	}

	once := func(c *fleet.Config) { c.MaxAttempts = 1 }
	hasty := []*fleet.Store{open(t, srv, "node-c", once), open(t, srv, "node-d", once)}
	lost := 0
	for i := range 5 {
		for _, err := range register(hasty, fmt.Sprintf("once-%d", i)) {
			if err != nil {
				lost++
				require.NotErrorIs(t, err, model.ErrFleetUnavailable)
				require.ErrorIs(t, err, model.ErrStore)
				require.ErrorContains(t, err, "lost the race to other writers 1 times")
			}
		}
	}
	t.Logf("%d of 40 single attempts lost the race", lost)
}

// TestAVolumeReadsItsOwnPluginsHealthWhateverWasReadBefore reads volumes
// of two plugins in turn, one healthy on both nodes and one on none: each
// read gives its own plugin's health.
func TestAVolumeReadsItsOwnPluginsHealthWhateverWasReadBefore(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)
	registered(t, a, volume("on-ebs", model.AccessModeMultiNodeReader))
	nfs := withExternal("on-nfs", "nfs-1")
	nfs.PluginID = "nfs"
	registered(t, a, nfs)
	for _, id := range []string{"on-ebs", "on-nfs", "on-nfs", "on-ebs", "on-ebs", "on-nfs"} {
		v, err := b.GetVolume(ctx, "", id)
		require.NoError(t, err)
		healthy := map[string]int{"on-ebs": 2, "on-nfs": 0}[id]
		require.Equal(t, healthy > 0, v.Health.Schedulable, "%s", id)
		require.Equal(t, healthy, v.Health.NodesHealthy, "%s", id)
	}
}
