package registry_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

func TestCloseReleasesTheFileAndLeavesNothingRunning(t *testing.T) {
	running := goleak.IgnoreCurrent()
	path := filepath.Join(t.TempDir(), "state.db")
	opts := registry.OpenOptions{
		Config: registry.Config{Logger: probe.Logger(t)},
		Store:  storage.BoltOptions{LockTimeout: 50 * time.Millisecond},
	}
	r, err := registry.Open(path, opts)
	require.NoError(t, err)
	sub, err := r.Subscribe(context.Background(), csiNode, registry.SubscribeOptions{})
	require.NoError(t, err)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.Equal(t, "alloc-0", receive(t, sub.C).GetPlugin().GetAllocId())

	_, err = registry.Open(path, opts)
	require.ErrorIs(t, err, storage.ErrLocked, "the open registry holds the file's lock")

	require.NoError(t, r.Close())
	requireClosed(t, sub.C)
	require.ErrorIs(t, sub.Err(), registry.ErrShutdown)
	require.NoError(t, r.Close(), "a second Close")
	goleak.VerifyNone(t, running)

	again, err := registry.Open(path, opts)
	require.NoError(t, err, "Close released the lock")
	_, err = again.PluginForAlloc(csiNode, "my-plugin", "alloc-0")
	require.NoError(t, err, "what the first registry wrote is there")
	require.NoError(t, again.Close())
	goleak.VerifyNone(t, running)
}

func TestOpenRefusesABucketOfTheCallers(t *testing.T) {
	_, err := registry.Open(filepath.Join(t.TempDir(), "state.db"),
		registry.OpenOptions{Config: registry.Config{Bucket: memoryBucket(t)}})
	require.ErrorIs(t, err, registry.ErrInvalid)
	require.ErrorContains(t, err, "OpenOptions.Config.Bucket must be nil")
}

func TestOpenFailsCleanlyWhenTheFileCannotOpen(t *testing.T) {
	running := goleak.IgnoreCurrent()
	_, err := registry.Open(filepath.Join(t.TempDir(), "no-such-dir", "state.db"), registry.OpenOptions{})
	require.Error(t, err)
	require.ErrorContains(t, err, "no-such-dir", "the error names the file")
	goleak.VerifyNone(t, running)
}

func TestCloseOfARegistryFromNewLeavesTheCallersSystemAndStore(t *testing.T) {
	system := probe.NewSystem(t)
	store := storage.NewMemory()
	bucket, err := store.Bucket(registry.BucketName)
	require.NoError(t, err)
	r, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(t, err)
	require.Same(t, system, r.System())

	require.NoError(t, r.Close())

	require.False(t, system.IsStopped(), "the caller's system runs on")
	require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte("k"), []byte("v"))}), "the caller's store is open")
}
