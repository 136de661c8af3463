package fleet_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/fleet"
	"github.com/plugvisor/plugvisor/fleet/etcdtest"
	"github.com/plugvisor/plugvisor/internal/errwalk"
)

// TestMain runs an etcd member when StartProcess started this binary for
// one (the idle CPU measurement), else the tests, checking for leaks.
func TestMain(m *testing.M) {
	etcdtest.RunIfChild()
	goleak.VerifyTestMain(m)
}

// TestAClaimOnOneNodeIsSeenAndEnforcedOnAnother registers a volume on one
// node, claims it for writing there, and checks that another node sees the
// claim and is refused a second writer until the first one is freed.
func TestAClaimOnOneNodeIsSeenAndEnforcedOnAnother(t *testing.T) {
	a, b, ctx := twoHealthyNodes(t)

	reg := registered(t, a, volume("db", model.AccessModeSingleNodeWriter))
	require.NotZero(t, reg.CreateIndex)
	require.Equal(t, reg.CreateIndex, reg.ModifyIndex)

	claimed, err := a.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))
	require.NoError(t, err)
	require.Contains(t, claimed.WriteClaims, "alloc-1")
	require.Greater(t, claimed.ModifyIndex, reg.ModifyIndex)

	seen, err := b.GetVolume(ctx, "default", "db")
	require.NoError(t, err)
	require.Contains(t, seen.WriteClaims, "alloc-1")
	require.Equal(t, claimed.ModifyIndex, seen.ModifyIndex)
	require.True(t, seen.Health.Schedulable)
	require.Equal(t, 2, seen.Health.NodesHealthy, "both nodes run a healthy node plugin")

	_, err = b.Claim(ctx, "", "db", writeClaim("alloc-2", "node-b"))
	require.ErrorIs(t, err, csi.ErrClaimRefused)
	require.ErrorIs(t, err, model.ErrVolumeMaxClaims)
	_, err = b.Claim(ctx, "", "db", readClaim("alloc-3", "node-b"))
	require.ErrorIs(t, err, model.ErrNodeConflict, "a single-node volume takes no reader on another node")

	again, err := a.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))
	require.NoError(t, err, "claiming again what the alloc holds changes nothing")
	require.Equal(t, claimed.ModifyIndex, again.ModifyIndex, "and writes nothing")

	released, err := a.Release(ctx, "", "db", free("alloc-1"))
	require.NoError(t, err)
	require.Empty(t, released.WriteClaims)

	got, err := b.Claim(ctx, "", "db", writeClaim("alloc-2", "node-b"))
	require.NoError(t, err)
	require.Contains(t, got.WriteClaims, "alloc-2")
}

func TestErrorsKeepTheCatalogsSentinels(t *testing.T) {
	_, stores := fleetWithDB(t, model.AccessModeSingleNodeWriter, "node-a")
	s := stores[0]
	ctx := testCtx(t)
	_, err := s.Claim(ctx, "", "db", writeClaim("alloc-1", "node-a"))
	require.NoError(t, err)

	tests := []struct {
		name string
		err  error
		want error
	}{
		{"a claim of an unknown volume is not found",
			second(s.Claim(ctx, "", "nope", writeClaim("alloc-2", "node-a"))), model.ErrVolumeNotFound},
		{"getting an unknown volume is not found",
			second(s.GetVolume(ctx, "", "nope")), model.ErrVolumeNotFound},
		{"listing an unsafe namespace is invalid",
			second(s.ListVolumes(ctx, "a/b")), model.ErrInvalid},
		{"an unsafe volume ID is invalid",
			second(s.GetVolume(ctx, "", "../etc")), model.ErrInvalid},
		{"a claim with an unsafe alloc ID is invalid",
			second(s.Claim(ctx, "", "db", writeClaim("a/b", "node-a"))), model.ErrInvalid},
		{"a new description of a claimed volume is in use",
			second(s.RegisterVolume(ctx, volume("db", model.AccessModeMultiNodeReader))), model.ErrVolumeInUse},
		{"deregistering a claimed volume is in use",
			s.DeregisterVolume(ctx, "", "db"), model.ErrVolumeInUse},
		{"marking a claimed volume deleting is in use",
			second(s.MarkVolumeDeleting(ctx, "", "db")), model.ErrVolumeInUse},
		{"a negative capacity is invalid",
			second(s.RecordVolumeCapacity(ctx, "", "db", -1)), model.ErrInvalid},
		{"a second writer on the same node is refused by the model",
			second(s.Claim(ctx, "", "db", writeClaim("alloc-2", "node-a"))), model.ErrVolumeMaxClaims},
		{"a release to state taken is invalid",
			second(s.Release(ctx, "", "db", writeClaim("alloc-1", "node-a"))), model.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.err, tt.want)
			require.Empty(t, errwalk.Repeated(tt.err.Error()), "the catalog's sentinel said once: %q", tt.err)
		})
	}
	v, err := s.GetVolume(ctx, "", "db")
	require.NoError(t, err)
	require.Len(t, v.WriteClaims, 1, "no refused call changed the volume")
	require.Zero(t, v.CapacityBytes)
	require.False(t, v.Deleting)
}

// second is the error of a call that returns a value and an error.
func second[T any](_ T, err error) error { return err }

func TestTheVolumeLifecycleOutsideClaims(t *testing.T) {
	srv := etcdtest.Start(t)
	s := open(t, srv, "node-a")
	ctx := testCtx(t)
	registered(t, s, volume("db", model.AccessModeMultiNodeReader))
	registered(t, s, volume("logs", model.AccessModeMultiNodeReader))
	other := volume("db", model.AccessModeMultiNodeReader)
	other.Namespace = "prod"
	_, err := s.RegisterVolume(ctx, other)
	var all []*model.CSIVolumeStub
	require.ErrorIs(t, err, model.ErrVolumeConflict, "plugin volume db is default/db already")
	require.Contains(t, err.Error(), `already catalog volume "db" in namespace "default"`)
	other.ExternalID = "db-prod"
	registered(t, s, other)

	all, err = s.ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, []string{"default/db", "default/logs", "prod/db"},
		[]string{all[0].Namespace + "/" + all[0].ID, all[1].Namespace + "/" + all[1].ID, all[2].Namespace + "/" + all[2].ID})
	prod, err := s.ListVolumes(ctx, "prod")
	require.NoError(t, err)
	require.Len(t, prod, 1)
	require.False(t, prod[0].Schedulable, "no node runs the plugin")

	v, err := s.RecordVolumeCapacity(ctx, "", "db", 1<<30)
	require.NoError(t, err)
	require.EqualValues(t, 1<<30, v.CapacityBytes)
	v, err = s.MarkVolumeDeleting(ctx, "", "db")
	require.NoError(t, err)
	require.True(t, v.Deleting)
	_, err = s.Claim(ctx, "", "db", readClaim("alloc-1", "node-a"))
	require.ErrorIs(t, err, model.ErrVolumeDeleting)

	require.NoError(t, s.DeregisterVolume(ctx, "", "db"))
	_, err = s.GetVolume(ctx, "", "db")
	require.ErrorIs(t, err, model.ErrVolumeNotFound)
	require.ErrorIs(t, s.DeregisterVolume(ctx, "", "db"), model.ErrVolumeNotFound)
}

func TestOpenRefusesABadConfigNamingTheField(t *testing.T) {
	tests := []struct {
		name  string
		cfg   fleet.Config
		field string
	}{
		{"no endpoints", fleet.Config{NodeID: "n"}, "Endpoints"},
		{"an unsafe node ID", fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "a/b"}, "NodeID"},
		{"a lease shorter than the minimum", fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "n", LeaseTTL: 1}, "LeaseTTL"},
		{"a lease of a fraction of a second", fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "n", LeaseTTL: 2500 * time.Millisecond}, "whole seconds"},
		{"a prefix without slashes", fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "n", Prefix: "x"}, "Prefix"},
		{"a negative volume limit", fleet.Config{Endpoints: []string{"http://127.0.0.1:1"}, NodeID: "n", MaxVolumes: -1}, "MaxVolumes is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fleet.Open(testCtx(t), tt.cfg)
			require.ErrorIs(t, err, model.ErrInvalid)
			require.Contains(t, err.Error(), tt.field)
		})
	}
}

// TestOpenWithoutEtcdIsUnavailable opens a Store on a port where no etcd
// listens: it fails within its request timeout, naming the endpoint.
func TestOpenWithoutEtcdIsUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	endpoints := srv.Endpoints()
	srv.Stop()
	_, err := fleet.Open(testCtx(t), fleet.Config{Endpoints: endpoints, NodeID: "node-a", RequestTimeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, model.ErrFleetUnavailable)
	require.Contains(t, err.Error(), endpoints[0])
}

// TestTheFleetHoldsNoMoreVolumesThanItsLimit registers new volumes from
// three nodes at once against a limit of 5: whatever the interleaving,
// the fleet holds 5, the others are refused with ErrVolumeLimit, and a
// volume already there can still be registered again.
func TestTheFleetHoldsNoMoreVolumesThanItsLimit(t *testing.T) {
	srv := etcdtest.Start(t)
	limit := func(c *fleet.Config) { c.MaxVolumes = 5 }
	stores := []*fleet.Store{open(t, srv, "node-a", limit), open(t, srv, "node-b", limit), open(t, srv, "node-c", limit)}
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			_, err := stores[i%3].RegisterVolume(ctx, volume(fmt.Sprintf("vol-%d", i), model.AccessModeSingleNodeWriter))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	registered := 0
	for err := range errs {
		if err == nil {
			registered++
			continue
		}
		require.ErrorIs(t, err, model.ErrVolumeLimit)
		require.ErrorContains(t, err, "the catalog holds 5 volumes, the limit")
	}
	require.Equal(t, 5, registered)
	list, err := stores[0].ListVolumes(ctx, "")
	require.NoError(t, err)
	require.Len(t, list, 5)
	_, err = stores[1].RegisterVolume(ctx, volume(list[0].ID, model.AccessModeSingleNodeWriter))
	require.NoError(t, err, "a volume already in the fleet is registered again at the limit")
	require.NoError(t, stores[2].CheckRoom(ctx, "", list[0].ID), "a create's early look lets a volume already there through")
	require.ErrorIs(t, stores[2].CheckRoom(ctx, "", "vol-new"), model.ErrVolumeLimit, "and refuses a new one")
}

// TestARegistrationAnswersWithTheVolumesRealHealth registers a volume of
// a plugin healthy on two nodes, new and then described anew: each answer
// says it is schedulable on both, as a read does.
func TestARegistrationAnswersWithTheVolumesRealHealth(t *testing.T) {
	srv := etcdtest.Start(t)
	a, b := open(t, srv, "node-a"), open(t, srv, "node-b")
	healthyNode(t, a)
	healthyNode(t, b)
	v := volume("db", model.AccessModeSingleNodeWriter)
	got := registered(t, a, v)
	require.True(t, got.Schedulable, "a new volume")
	require.Equal(t, 2, got.NodesHealthy)
	v.AccessMode = model.AccessModeMultiNodeReader
	got = registered(t, a, v)
	require.True(t, got.Schedulable, "a volume described anew")
	require.Equal(t, 2, got.NodesHealthy)
	read, err := a.GetVolume(testCtx(t), "", "db")
	require.NoError(t, err)
	require.Equal(t, read.Health, got.Health)
}
