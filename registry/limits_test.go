package registry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
)

func startLimited(t *testing.T, limits registry.Limits) (*registry.Registry, *probe.Probe) {
	t.Helper()
	system := probe.NewSystem(t)
	bucket := memoryBucket(t)
	r, err := registry.New(system, registry.Config{Bucket: bucket, Logger: probe.Logger(t), Limits: limits,
		Name: fmt.Sprintf("registry-%p", bucket)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Shutdown()) })
	p := probe.New(t, system)
	subscribe(t, r, p, "", false)
	return r, p
}

func TestTheLimitOnAllocationsPerTypeRefusesAndChangesNothing(t *testing.T) {
	r, p := startLimited(t, registry.Limits{PluginsPerType: 3})
	for i := range 3 {
		require.NoError(t, r.RegisterPlugin(plugin(i)))
		probe.Expect[*messages.PluginRegistered](t, p, timeout)
	}
	before := r.Snapshot()

	err := r.RegisterPlugin(pluginNamed("fourth", 3))
	require.ErrorIs(t, err, registry.ErrLimit, "a limit, answered 429 by the API, not a bad argument")
	require.ErrorContains(t, err, `plugin type "csi-node" holds 3 allocations, the limit`)
	require.ErrorContains(t, err, "-max-plugins-per-type")
	p.ExpectNone(t, 0)
	requireUnchanged(t, before, r.Snapshot())

	changed := plugin(1)
	changed.Version = "v9"
	require.NoError(t, r.RegisterPlugin(changed), "an allocation already there may still change")
	probe.Expect[*messages.PluginUpdated](t, p, timeout)

	other := pluginNamed("other", 7)
	other.Type = "docker-volume"
	require.NoError(t, r.RegisterPlugin(other), "the limit is per type")

	require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"))
	require.NoError(t, r.RegisterPlugin(pluginNamed("fourth", 3)), "room made by a deregistration is usable")
}

func TestTheLimitOnOptionsSizeRefusesAndChangesNothing(t *testing.T) {
	r, p := startLimited(t, registry.Limits{OptionsBytes: 100})
	fits := plugin(1)
	fits.Options = map[string]string{"k": strings.Repeat("v", 99)}
	require.NoError(t, r.RegisterPlugin(fits))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)
	before := r.Snapshot()

	over := plugin(2)
	over.Options = map[string]string{"k": strings.Repeat("v", 49), "k2": strings.Repeat("v", 49)}
	err := r.RegisterPlugin(over)
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorContains(t, err, "options are 101 bytes, over the limit of 100")
	require.ErrorContains(t, err, "-max-plugin-options-bytes")
	p.ExpectNone(t, 0)
	requireUnchanged(t, before, r.Snapshot())
}

func TestTheLimitsHaveDefaults(t *testing.T) {
	r, _ := startLimited(t, registry.Limits{})
	big := plugin(1)
	big.Options = map[string]string{}
	for i := range registry.DefaultOptionsBytes/registry.MaxOptionLen + 1 {
		big.Options[fmt.Sprint(i)] = strings.Repeat("v", registry.MaxOptionLen)
	}
	require.ErrorContains(t, r.RegisterPlugin(big), fmt.Sprintf("over the limit of %d", registry.DefaultOptionsBytes))
}

func TestTheLimitOnSubscriptionsRefusesUntilOneCloses(t *testing.T) {
	r, _ := startLimited(t, registry.Limits{Subscribers: 2})
	ctx, cancel := context.WithCancel(t.Context())
	first, err := r.Subscribe(ctx, "", registry.SubscribeOptions{})
	require.NoError(t, err)
	_, err = r.Subscribe(t.Context(), "", registry.SubscribeOptions{})
	require.NoError(t, err)

	_, err = r.Subscribe(t.Context(), csiNode, registry.SubscribeOptions{})
	require.ErrorIs(t, err, registry.ErrLimit)
	require.ErrorContains(t, err, "2 subscriptions are open, the limit")
	require.ErrorContains(t, err, "-max-subscribers")
	closed := r.PluginsUpdatedCh(t.Context(), "")
	_, open := <-closed
	require.False(t, open, "PluginsUpdatedCh past the limit is a closed channel")

	cancel()
	for range first.C { // drain until the subscription has ended
	}
	_, err = r.Subscribe(t.Context(), "", registry.SubscribeOptions{})
	require.NoError(t, err, "a closed subscription frees its slot")
}

// requireUnchanged fails unless after holds what before held.
func requireUnchanged(t *testing.T, before, after *registry.Snapshot) {
	t.Helper()
	require.Equal(t, before.Sequence(), after.Sequence(), "a refusal takes no sequence number")
	require.Equal(t, len(before.List("")), len(after.List("")))
	for i, p := range before.List("") {
		require.True(t, proto.Equal(p, after.List("")[i]), "a refusal changes no plugin")
	}
}
