package volumes_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/go-plugins-helpers/volume"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/discovery"
	"github.com/plugvisor/plugvisor/dockervolume"
	"github.com/plugvisor/plugvisor/dockervolume/localvolume"
	"github.com/plugvisor/plugvisor/dockervolume/volumes"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// BenchmarkMountUnmount: Docker volume mount + unmount pairs through the
// volume service, with its records in bbolt (fsync'd), against the
// reference plugin on a unix socket.
func BenchmarkMountUnmount(b *testing.B) {
	v := benchVolumes(b)
	ctx := context.Background()
	_, err := v.Create(ctx, "data", "local", nil)
	require.NoError(b, err)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("c%d", i)
		_, err := v.Mount(ctx, "data", id)
		require.NoError(b, err)
		require.NoError(b, v.Unmount(ctx, "data", id))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkMountUnmountParallel: the same on one volume per goroutine.
// Each volume's operations are serialised, different volumes' are not, and
// their durable writes share transactions (group commit).
func BenchmarkMountUnmountParallel(b *testing.B) {
	v := benchVolumes(b)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(8) // 16 goroutines on 2 cores: their store writes share fsyncs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("v%d", n.Add(1))
		_, err := v.Create(ctx, name, "local", nil)
		require.NoError(b, err)
		for i := 0; pb.Next(); i++ {
			id := fmt.Sprintf("c%d", i)
			_, err := v.Mount(ctx, name, id)
			require.NoError(b, err)
			require.NoError(b, v.Unmount(ctx, name, id))
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// benchVolumes starts the volume service as the agent wires it: a
// registry, discovery watching a socket directory, and the reference
// plugin on a socket there, registered as "local".
func benchVolumes(b *testing.B) *volumes.Service {
	b.Helper()
	dir, err := os.MkdirTemp("", "pvb")
	require.NoError(b, err)
	b.Cleanup(func() { os.RemoveAll(dir) })
	sockets := filepath.Join(dir, "s")
	require.NoError(b, os.Mkdir(sockets, 0o755))
	system := actors.NewSystem(nil)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	require.NoError(b, err)
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, reg.Shutdown()) })
	disc, err := discovery.Start(system, discovery.Config{Dirs: discovery.Dirs{Sockets: []string{sockets}}, Registry: reg})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, disc.Shutdown()) })

	d, err := localvolume.New(filepath.Join(dir, "vols"), hclog.NewNullLogger())
	require.NoError(b, err)
	l, err := net.Listen("unix", filepath.Join(sockets, "local.sock"))
	require.NoError(b, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = volume.NewHandler(d).Serve(l) }()
	b.Cleanup(func() { l.Close(); <-done })
	deadline := time.Now().Add(time.Minute)
	for _, ok := reg.Snapshot().Current(dockervolume.PluginType, "local"); !ok; _, ok = reg.Snapshot().Current(dockervolume.PluginType, "local") {
		if time.Now().After(deadline) {
			b.Fatal("the reference plugin was not registered within a minute")
		}
		time.Sleep(2 * time.Millisecond)
	}

	store, err := storage.OpenBolt(filepath.Join(dir, "state.db"), storage.BoltOptions{})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, store.Close()) })
	records, err := store.Bucket(volumes.Bucket)
	require.NoError(b, err)
	v, err := volumes.Start(system, volumes.Config{Bucket: records,
		Drivers: volumes.RegistryDrivers{Registry: reg, Discovery: disc}})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, v.Shutdown()) })
	return v
}
