package volumes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/storage"
)

// BenchmarkMountUnmount100Volumes mounts and unmounts 100 volumes of the
// reference hostpath plugin in parallel, one goroutine per volume, then
// does the kernel's part of the same pairs (a stage bind mount, a publish
// bind mount and both unmounts) with no plugvisor and no plugin, from 100
// goroutines, in the same process. It reports both runs' pairs per second,
// p50 and p99 of a pair, CPU per pair (user and system time of the
// process, the in-process plugin's included) and the cores that makes,
// their ratio, the manager's durable record writes per pair, the store's
// commits per pair (each is two fdatasyncs), the plugin's journal syncs
// per pair, and the 1-minute load average at the end. The plugin logs
// warnings only, so that the output stays short.
func BenchmarkMountUnmount100Volumes(b *testing.B) {
	const count = 100
	writes := &countingBucket{}
	n, plugin := newHostpathNode(b, func(bucket storage.Bucket) storage.Bucket {
		writes.Bucket = bucket
		return writes
	}, hclog.New(&hclog.LoggerOptions{Name: b.Name(), Level: hclog.Warn, Output: b.Output()}))
	c, err := csi.Dial(ctx, plugin.Endpoint, csi.Options{})
	require.NoError(b, err)
	for i := range count {
		resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
		require.NoError(b, err)
		n.catalog.add(fmt.Sprintf("v%d", i), resp.GetVolume().GetVolumeId(), "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	}
	require.NoError(b, c.Close())

	b.ResetTimer()
	writes.applies.Store(0)
	commits, syncs := n.store.Commits(), plugin.Driver.JournalSyncs()
	volumes := runPairs(b, count, func(i int) error {
		id := fmt.Sprintf("v%d", i)
		if _, err := n.manager.Mount(ctx, "", id, "alloc", false); err != nil {
			return err
		}
		return n.manager.Unmount(ctx, "", id, "alloc")
	})
	b.StopTimer()
	commits, syncs = n.store.Commits()-commits, plugin.Driver.JournalSyncs()-syncs
	kernel := runPairs(b, count, kernelPair(b, filepath.Join(n.dir, "kernel"), count))
	volumes.report(b, "")
	kernel.report(b, "kernel-")
	if kernel.pairsPerSec > 0 {
		b.ReportMetric(volumes.pairsPerSec/kernel.pairsPerSec, "ratio")
	}
	b.ReportMetric(float64(writes.applies.Load())/float64(b.N), "record-writes/pair")
	b.ReportMetric(float64(commits)/float64(b.N), "store-commits/pair")
	b.ReportMetric(float64(syncs)/float64(b.N), "plugin-syncs/pair")
	b.ReportMetric(loadAverage(b), "load1")
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/loadavg")
	require.NoError(b, err)
	load, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	require.NoError(b, err)
	return load
}

// countingBucket counts the Apply calls to its bucket: each is one durable
// write of the manager's records (group commit may share a sync).
type countingBucket struct {
	storage.Bucket
	applies atomic.Int64
}

func (c *countingBucket) Apply(ops []storage.Op) error {
	c.applies.Add(1)
	return c.Bucket.Apply(ops)
}

// pairRun is what runPairs measured.
type pairRun struct {
	pairsPerSec, p50ms, p99ms, cpuUsPerPair float64
}

func (r pairRun) report(b *testing.B, prefix string) {
	b.ReportMetric(r.pairsPerSec, prefix+"pairs/s")
	b.ReportMetric(r.p50ms, prefix+"p50-ms")
	b.ReportMetric(r.p99ms, prefix+"p99-ms")
	b.ReportMetric(r.cpuUsPerPair, prefix+"cpu-us/pair")
	// cores is the CPU the run used: near the machine's cores, CPU bounds it.
	b.ReportMetric(r.cpuUsPerPair*r.pairsPerSec/1e6, prefix+"cores")
}

// runPairs runs b.N pairs from count goroutines, goroutine i doing pair(i)
// for every count-th pair, and measures them.
func runPairs(b *testing.B, count int, pair func(i int) error) pairRun {
	latencies := make([][]time.Duration, count)
	cpu0 := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			for j := i; j < b.N; j += count {
				t0 := time.Now()
				if err := pair(i); err != nil {
					b.Error(err)
					return
				}
				latencies[i] = append(latencies[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime(b)-cpu0
	all := slices.Concat(latencies...)
	if len(all) == 0 {
		return pairRun{}
	}
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return pairRun{
		pairsPerSec:  float64(len(all)) / elapsed.Seconds(),
		p50ms:        ms(all[len(all)/2]),
		p99ms:        ms(all[len(all)*99/100]),
		cpuUsPerPair: float64(cpu.Microseconds()) / float64(len(all)),
	}
}

// cpuTime is the user and system time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// kernelPair prepares, under dir, count volume directories with a staging
// and a target directory each, and returns the kernel's part of a pair on
// volume i: bind the volume on its staging path, bind that on its target,
// then unmount the target and the staging path.
func kernelPair(b *testing.B, dir string, count int) func(i int) error {
	for i := range count {
		for _, sub := range []string{"volume", "staging", "target"} {
			require.NoError(b, os.MkdirAll(filepath.Join(dir, strconv.Itoa(i), sub), 0o750))
		}
	}
	b.Cleanup(func() { require.NoError(b, hostpathtest.UnmountAll(b, dir)) })
	return func(i int) error {
		vol, staging, target := filepath.Join(dir, strconv.Itoa(i), "volume"), filepath.Join(dir, strconv.Itoa(i), "staging"), filepath.Join(dir, strconv.Itoa(i), "target")
		for _, m := range [][2]string{{vol, staging}, {staging, target}} {
			if err := syscall.Mount(m[0], m[1], "", syscall.MS_BIND, ""); err != nil {
				return fmt.Errorf("bind %s on %s: %w", m[0], m[1], err)
			}
		}
		for _, p := range []string{target, staging} {
			if err := syscall.Unmount(p, 0); err != nil {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
		return nil
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
