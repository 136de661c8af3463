package bench_test

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/bench"
)

// The adapters are checked before they are measured.

func TestNomadTargetDeliversToDrainingSubscribers(t *testing.T) {
	n := bench.NewNomad(nil)
	var got atomic.Int64
	stop := n.Subscribe(func() { got.Add(1) })
	for i := range 10 {
		alloc := string(rune('a' + i))
		require.NoError(t, n.Register("p", alloc))
		require.NoError(t, n.Deregister("p", alloc))
	}
	require.Eventually(t, func() bool { return got.Load() == 20 }, 5*time.Second, time.Millisecond)
	require.Error(t, n.Dispense("p"), "p has no allocation left")
	stop()
	require.NoError(t, n.Close(closeTimeout))
}

func TestNomadTargetStallsOnAStuckSubscriberAndRecoversOnRelease(t *testing.T) {
	n := bench.NewNomad(nil)
	release := n.SubscribeStuck()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5 {
			alloc := string(rune('a' + i))
			_ = n.Register("p", alloc)
			_ = n.Deregister("p", alloc)
		}
	}()
	select {
	case <-done:
		t.Fatal("Nomad's registry did not stall on a subscriber that never reads")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("releasing the stuck subscriber did not let the registry go on")
	}
	require.NoError(t, n.Close(closeTimeout))
}

func TestNomadTargetCloseGivesUpOnAStalledRegistry(t *testing.T) {
	n := bench.NewNomad(nil)
	_ = n.SubscribeStuck() // never released
	go func() {
		for i := range 5 {
			_ = n.Register("p", string(rune('a'+i)))
		}
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	require.Error(t, n.Close(200*time.Millisecond), "Close of a stalled Nomad registry gives up")
	require.Less(t, time.Since(start), 2*time.Second)
}

func TestBoltStatePersistsTheListsNomadLoses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.db")
	state, err := bench.OpenBoltState(path)
	require.NoError(t, err)
	first := bench.NewNomad(state)
	require.NoError(t, first.Register("p", "a0"))
	require.NoError(t, first.Register("p", "a1"))
	require.NoError(t, first.Register("q", "a2"))
	require.NoError(t, first.Close(closeTimeout))
	require.NoError(t, state.Close())

	state, err = bench.OpenBoltState(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = state.Close() })
	restored := bench.NewNomad(state)
	t.Cleanup(func() { _ = restored.Close(closeTimeout) })
	require.Equal(t, 2, restored.List())
	info, err := restored.Registry().PluginForAlloc("csi-node", "p", "a0")
	require.NoError(t, err)
	require.Equal(t, "/run/plugvisor/a0/csi.sock", info.ConnectionInfo.SocketPath)
	current := map[string]string{}
	for _, p := range restored.Registry().ListPlugins("csi-node") {
		current[p.Name] = p.AllocID
	}
	require.Equal(t, map[string]string{"p": "a1", "q": "a2"}, current, "the newest allocation of each name is current")
}
