package volumes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	catalog "github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// BenchmarkMountUnmount100Volumes mounts and unmounts 100 volumes of the
// reference hostpath plugin in parallel, one goroutine per volume, and
// reports pairs per second and the p99 of a pair.
func BenchmarkMountUnmount100Volumes(b *testing.B) {
	n := newNode(b, nil)
	plugin := hostpathtest.Serve(b, hostpath.Config{Name: "hp", NodeID: "n1", Root: filepath.Join(n.dir, "hp")})
	n.register(volumes.NodePluginType, "hp", "a1", plugin.Endpoint)
	c, err := csi.Dial(ctx, plugin.Endpoint, csi.Options{})
	require.NoError(b, err)
	const count = 100
	for i := range count {
		resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
		require.NoError(b, err)
		n.catalog.add(fmt.Sprintf("v%d", i), resp.GetVolume().GetVolumeId(), "hp", catalog.AccessModeSingleNodeWriter, catalog.AttachmentModeFileSystem)
	}
	require.NoError(b, c.Close())

	latencies := make([][]time.Duration, count)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			id := fmt.Sprintf("v%d", i)
			for j := i; j < b.N; j += count {
				t0 := time.Now()
				if _, err := n.manager.Mount(ctx, "", id, "alloc", false); err != nil {
					b.Error(err)
					return
				}
				if err := n.manager.Unmount(ctx, "", id, "alloc"); err != nil {
					b.Error(err)
					return
				}
				latencies[i] = append(latencies[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(latencies...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "pairs/s")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// BenchmarkStartReconciling1000Records starts a volume manager on 1,000
// records of published volumes whose targets the mount table has, and
// waits until every reconcile has run.
func BenchmarkStartReconciling1000Records(b *testing.B) {
	const count = 1000
	n := newNode(b, nil)
	n.stop()
	var table strings.Builder
	var ops []storage.Op
	for i := range count {
		id := fmt.Sprintf("v%d", i)
		target := filepath.Join(n.root, "hp", "per-alloc", "alloc", "default", id)
		fmt.Fprintf(&table, "%d 1 0:1 / %s rw - tmpfs none rw\n", i+2, target)
		rec := &messages.VolumeRecord{Namespace: "default", VolumeId: id, PluginId: "hp", ExternalId: id,
			AccessMode: "single-node-writer", AttachmentMode: "file-system",
			Stage:     &messages.VolumeStage{State: "staged", StagingPath: filepath.Join(n.root, "hp", "staging", "default", id), NodeSocket: "/nowhere.sock"},
			Publishes: map[string]*messages.VolumePublish{"alloc": {AllocId: "alloc", State: "published", TargetPath: target, NodeSocket: "/nowhere.sock"}}}
		value, err := proto.Marshal(rec)
		require.NoError(b, err)
		ops = append(ops, storage.Put([]byte("volume/default/"+id), value))
	}
	mountInfo := filepath.Join(n.dir, "mountinfo")
	require.NoError(b, os.WriteFile(mountInfo, []byte(table.String()), 0o600))
	store, err := storage.OpenBolt(n.dbPath, storage.BoltOptions{})
	require.NoError(b, err)
	bucket, err := store.Bucket(volumes.Bucket)
	require.NoError(b, err)
	require.NoError(b, bucket.Apply(ops))
	require.NoError(b, store.Close())
	n.cfg.MountInfoPath = mountInfo

	b.ResetTimer()
	for range b.N {
		n.start()
		for i := range count {
			for n.status(fmt.Sprintf("v%d", i)).Busy {
				time.Sleep(time.Millisecond)
			}
		}
		b.StopTimer()
		n.stop()
		b.StartTimer()
	}
}
