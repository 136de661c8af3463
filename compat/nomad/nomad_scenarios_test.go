package nomad_test

// The scenarios of Nomad v1.11.3's own client/dynamicplugins/registry_test.go,
// ported to run against the adapter (a _test file cannot be imported).
// Each test keeps the name of the Nomad test it ports. The two
// TestPluginEventBroadcaster tests are not ported: they test Nomad's
// internal broadcaster, which the adapter replaces.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/client/dynamicplugins"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/compat/nomad"
)

func TestDynamicRegistry_RegisterPlugin_SendsUpdateEvents(t *testing.T) {
	r := newRegistry(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch := r.PluginsUpdatedCh(ctx, "csi")

	require.NoError(t, r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: "csi", Name: "my-plugin", ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))
	e := next(t, ch)
	require.Equal(t, dynamicplugins.EventTypeRegistered, e.EventType)
	require.Equal(t, "my-plugin", e.Info.Name)
}

func TestDynamicRegistry_DeregisterPlugin_SendsUpdateEvents(t *testing.T) {
	r := newRegistry(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ch := r.PluginsUpdatedCh(ctx, "csi")

	require.NoError(t, r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: "csi", Name: "my-plugin", AllocID: "alloc-0", ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))
	require.NoError(t, r.DeregisterPlugin("csi", "my-plugin", "alloc-0"))
	require.Equal(t, dynamicplugins.EventTypeRegistered, next(t, ch).EventType)
	e := next(t, ch)
	require.Equal(t, dynamicplugins.EventTypeDeregistered, e.EventType)
	require.Equal(t, "alloc-0", e.Info.AllocID)
}

func TestDynamicRegistry_DispensePlugin_Works(t *testing.T) {
	dispenseFn := func(*dynamicplugins.PluginInfo) (any, error) { return struct{}{}, nil }
	r := newRegistry(t, nil, map[string]dynamicplugins.PluginDispenser{"csi": dispenseFn})
	require.NoError(t, r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: "csi", Name: "my-plugin", ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))

	result, err := r.DispensePlugin("unknown-type", "unknown-name")
	require.Nil(t, result)
	require.EqualError(t, err, "no plugin dispenser found for type: unknown-type")

	result, err = r.DispensePlugin("csi", "unknown-name")
	require.Nil(t, result)
	require.EqualError(t, err, "plugin unknown-name for type csi not found")

	result, err = r.DispensePlugin("csi", "my-plugin")
	require.NotNil(t, result)
	require.NoError(t, err)
}

func TestDynamicRegistry_IsolatePluginTypes(t *testing.T) {
	r := newRegistry(t, nil, nil)
	require.NoError(t, r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: dynamicplugins.PluginTypeCSIController, Name: "my-plugin", AllocID: "alloc-0",
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))
	require.NoError(t, r.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: dynamicplugins.PluginTypeCSINode, Name: "my-plugin", AllocID: "alloc-1",
		ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))
	require.NoError(t, r.DeregisterPlugin(dynamicplugins.PluginTypeCSIController, "my-plugin", "alloc-0"))
	require.Len(t, r.ListPlugins(dynamicplugins.PluginTypeCSINode), 1)
	require.Empty(t, r.ListPlugins(dynamicplugins.PluginTypeCSIController))
}

func TestDynamicRegistry_StateStore(t *testing.T) {
	dispenseFn := func(i *dynamicplugins.PluginInfo) (any, error) { return i, nil }
	memdb := &MemDB{}
	oldR := newRegistry(t, memdb, map[string]dynamicplugins.PluginDispenser{"csi": dispenseFn})
	require.NoError(t, oldR.RegisterPlugin(&dynamicplugins.PluginInfo{
		Type: "csi", Name: "my-plugin", ConnectionInfo: &dynamicplugins.PluginConnectionInfo{},
	}))
	result, err := oldR.DispensePlugin("csi", "my-plugin")
	require.NotNil(t, result)
	require.NoError(t, err)

	// recreate the registry from the state store and query again
	newR := newRegistry(t, memdb, map[string]dynamicplugins.PluginDispenser{"csi": dispenseFn})
	result, err = newR.DispensePlugin("csi", "my-plugin")
	require.NotNil(t, result)
	require.NoError(t, err)
}

func TestDynamicRegistry_ConcurrentAllocs(t *testing.T) {
	dispenseFn := func(i *dynamicplugins.PluginInfo) (any, error) { return i, nil }
	dispensers := map[string]dynamicplugins.PluginDispenser{dynamicplugins.PluginTypeCSINode: dispenseFn}
	newPlugin := func(idx int) *dynamicplugins.PluginInfo {
		id := fmt.Sprintf("alloc-%d", idx)
		return &dynamicplugins.PluginInfo{
			Name: "my-plugin", Type: dynamicplugins.PluginTypeCSINode, Version: fmt.Sprintf("v%d", idx),
			ConnectionInfo: &dynamicplugins.PluginConnectionInfo{SocketPath: "/var/data/alloc/" + id + "/csi.sock"},
			AllocID:        id,
		}
	}
	dispensePlugin := func(t *testing.T, reg dynamicplugins.Registry) *dynamicplugins.PluginInfo {
		result, err := reg.DispensePlugin(dynamicplugins.PluginTypeCSINode, "my-plugin")
		require.NotNil(t, result)
		require.NoError(t, err)
		return result.(*dynamicplugins.PluginInfo)
	}

	t.Run("restore races on client restart", func(t *testing.T) {
		memdb := &MemDB{}
		oldR := newRegistry(t, memdb, dispensers)
		require.NoError(t, oldR.RegisterPlugin(newPlugin(0)))
		require.NoError(t, oldR.RegisterPlugin(newPlugin(1)))
		require.Equal(t, "alloc-1", dispensePlugin(t, oldR).AllocID)

		newR := newRegistry(t, memdb, dispensers)
		plugin := dispensePlugin(t, newR)
		require.Equal(t, "/var/data/alloc/alloc-1/csi.sock", plugin.ConnectionInfo.SocketPath)
		require.Equal(t, "alloc-1", plugin.AllocID)

		// The allocations are restored in the opposite order they were made.
		require.NoError(t, newR.RegisterPlugin(newPlugin(0)))
		plugin = dispensePlugin(t, newR)
		require.Equal(t, "/var/data/alloc/alloc-1/csi.sock", plugin.ConnectionInfo.SocketPath)
		require.Equal(t, "alloc-1", plugin.AllocID)
	})

	t.Run("replacement races on host restart", func(t *testing.T) {
		memdb := &MemDB{}
		oldR := newRegistry(t, memdb, dispensers)
		require.NoError(t, oldR.RegisterPlugin(newPlugin(0)))
		require.NoError(t, oldR.RegisterPlugin(newPlugin(1)))
		require.Equal(t, "alloc-1", dispensePlugin(t, oldR).AllocID)

		newR := newRegistry(t, memdb, dispensers)
		require.Equal(t, "alloc-1", dispensePlugin(t, newR).AllocID)
		// No old alloc runs after the host restarted: a replacement comes.
		require.NoError(t, newR.RegisterPlugin(newPlugin(2)))
		plugin := dispensePlugin(t, newR)
		require.Equal(t, "/var/data/alloc/alloc-2/csi.sock", plugin.ConnectionInfo.SocketPath)
		require.Equal(t, "alloc-2", plugin.AllocID)
	})

	t.Run("interleaved register and deregister", func(t *testing.T) {
		reg := newRegistry(t, &MemDB{}, dispensers)
		require.NoError(t, reg.RegisterPlugin(newPlugin(0)))
		// The replacement registers before the old plugin deregisters.
		require.NoError(t, reg.RegisterPlugin(newPlugin(1)))
		require.Equal(t, "alloc-1", dispensePlugin(t, reg).AllocID)
		require.NoError(t, reg.DeregisterPlugin(dynamicplugins.PluginTypeCSINode, "my-plugin", "alloc-0"))
		require.Equal(t, "alloc-1", dispensePlugin(t, reg).AllocID)
	})
}

// MemDB is Nomad's test StateStorage (client/dynamicplugins/registry_test.go):
// it keeps the pointer it was given.
type MemDB struct {
	dynamicManagerPs *dynamicplugins.RegistryState
	mu               sync.RWMutex
}

func (m *MemDB) GetDynamicPluginRegistryState() (*dynamicplugins.RegistryState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dynamicManagerPs, nil
}

func (m *MemDB) PutDynamicPluginRegistryState(ps *dynamicplugins.RegistryState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dynamicManagerPs = ps
	return nil
}

// wait bounds every wait, generously for a loaded machine.
const wait = 30 * time.Second

// newRegistry starts an adapter that the test shuts down.
func newRegistry(t *testing.T, state dynamicplugins.StateStorage, dispensers map[string]dynamicplugins.PluginDispenser) *nomad.Registry {
	t.Helper()
	r := nomad.NewRegistry(state, dispensers)
	t.Cleanup(r.Shutdown)
	return r
}

// next returns the next event on ch, failing after wait.
func next(t *testing.T, ch <-chan *dynamicplugins.PluginUpdateEvent) *dynamicplugins.PluginUpdateEvent {
	t.Helper()
	select {
	case e, ok := <-ch:
		require.True(t, ok, "the channel closed")
		return e
	case <-time.After(wait):
		t.Fatal("no event within", wait)
		return nil
	}
}
