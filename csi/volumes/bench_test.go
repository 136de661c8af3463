package volumes_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/hostpath/hostpathtest"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/internal/cputime"
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
// per pair, the disk flushes they make per pair, the share of the run the
// store spent committing and the plugin syncing, the waits for a CPU per
// pair (the process's threads in the kernel's run queue, goroutines
// runnable), and the 1-minute load average at the end. A second baseline,
// kernel+sync, adds to each kernel pair as many fdatasyncs as plugvisor's
// pairs made flushes (rounded up), on a file of its own per volume: the
// disk's ceiling for that many flushes, with no group commit to share
// them. A third, bare-csi, has a bare client make the plugin's four node
// calls. The hostpath plugin logs warnings only, so that the output
// stays short.
//
// It runs in three shapes: one-alloc mounts every volume for the same
// alloc, alloc-per-volume mounts each for an alloc of its own, as a node
// starting 100 workloads does, and lean-plugin is one-alloc with a plugin
// that does the kernel's part and nothing else (leanPlugin): the manager
// and gRPC over the kernel.
func BenchmarkMountUnmount100Volumes(b *testing.B) {
	oneAlloc := func(string) string { return "alloc" }
	b.Run("one-alloc", func(b *testing.B) { benchMountUnmount(b, oneAlloc, hostpathPlugin) })
	b.Run("alloc-per-volume", func(b *testing.B) {
		benchMountUnmount(b, func(id string) string { return "alloc-" + id }, hostpathPlugin)
	})
	b.Run("lean-plugin", func(b *testing.B) { benchMountUnmount(b, oneAlloc, leanNodePlugin) })
}

// benchPlugin is the node plugin of a volumes benchmark, started with its
// node: its socket, its IDs of the volumes, and its journal's syncs and
// time syncing so far (none for a plugin without a journal).
type benchPlugin struct {
	node     *node
	endpoint string
	external []string
	syncs    func() int64
	syncing  func() time.Duration
}

// hostpathPlugin starts a node with the reference hostpath plugin "hp"
// and count volumes created on it.
func hostpathPlugin(b *testing.B, wrap func(storage.Bucket) storage.Bucket, count int) benchPlugin {
	n, plugin := newHostpathNode(b, wrap, hclog.New(&hclog.LoggerOptions{Name: b.Name(), Level: hclog.Warn, Output: b.Output()}))
	c, err := csi.Dial(ctx, plugin.Endpoint, csi.Options{})
	require.NoError(b, err)
	defer func() { require.NoError(b, c.Close()) }()
	external := make([]string, count)
	for i := range count {
		resp, err := c.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: fmt.Sprintf("v%d", i), VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
		require.NoError(b, err)
		external[i] = resp.GetVolume().GetVolumeId()
	}
	return benchPlugin{node: n, endpoint: plugin.Endpoint, external: external, syncs: plugin.Driver.JournalSyncs, syncing: plugin.Driver.JournalTime}
}

// benchMountUnmount is BenchmarkMountUnmount100Volumes with volume id
// mounted for allocOf(id), through the plugin start makes.
func benchMountUnmount(b *testing.B, allocOf func(id string) string,
	start func(*testing.B, func(storage.Bucket) storage.Bucket, int) benchPlugin) {
	const count = 100
	writes := &countingBucket{}
	plugin := start(b, func(bucket storage.Bucket) storage.Bucket {
		writes.Bucket = bucket
		return writes
	}, count)
	n, external := plugin.node, plugin.external
	for i := range count {
		n.catalog.add(fmt.Sprintf("v%d", i), external[i], "hp", model.AccessModeSingleNodeWriter, model.AttachmentModeFileSystem)
	}
	conn, err := grpc.NewClient("unix://"+plugin.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(b, err)
	defer func() { require.NoError(b, conn.Close()) }()

	b.ResetTimer()
	writes.applies.Store(0)
	commits, syncs := n.store.Commits(), plugin.syncs()
	storeBusy, journalBusy := n.store.CommitTime(), plugin.syncing()
	runqueue, runnable := runqueueWait(b), runnableWait()
	volumes := runPairs(b, count, func(i int) error {
		id := fmt.Sprintf("v%d", i)
		if _, err := n.manager.Mount(ctx, "", id, allocOf(id), false); err != nil {
			return err
		}
		return n.manager.Unmount(ctx, "", id, allocOf(id))
	})
	b.StopTimer()
	commits, syncs = n.store.Commits()-commits, plugin.syncs()-syncs
	storeBusy, journalBusy = n.store.CommitTime()-storeBusy, plugin.syncing()-journalBusy
	runqueue, runnable = runqueueWait(b)-runqueue, runnableWait()-runnable
	// flushes is the disk flushes a pair of plugvisor's made: two
	// fdatasyncs a store commit, one fsync a journal sync.
	flushes := float64(2*commits+syncs) / float64(b.N)
	// What any CSI node manager pays for the same pairs with this plugin:
	// its four node calls, with no record, claim or actor.
	bare := runPairs(b, count, csiPair(csipb.NewNodeClient(conn), filepath.Join(n.dir, "bare-csi"), external))
	kernel := runPairs(b, count, kernelPair(b, filepath.Join(n.dir, "kernel"), count, kernelWork{}))
	// The kernel's part with the target directory CSI has every plugin
	// make in NodePublishVolume and remove in NodeUnpublishVolume: what
	// the filesystem charges for those two, which no plugin avoids.
	dirs := runPairs(b, count, kernelPair(b, filepath.Join(n.dir, "kernel-mkdir"), count, kernelWork{makeTarget: true}))
	// The disk's ceiling for plugvisor's path: the kernel's part of a
	// pair with as many syncs as plugvisor's pairs made (rounded up),
	// each goroutine syncing its own file, so nothing is shared.
	syncing := runPairs(b, count, kernelPair(b, filepath.Join(n.dir, "kernel-sync"), count, kernelWork{syncs: int(math.Ceil(flushes))}))
	volumes.report(b, "")
	kernel.report(b, "kernel-")
	dirs.report(b, "kernel+mkdir-")
	syncing.report(b, "kernel+sync-")
	bare.report(b, "bare-csi-")
	if kernel.pairsPerSec > 0 && dirs.pairsPerSec > 0 && syncing.pairsPerSec > 0 && bare.pairsPerSec > 0 {
		b.ReportMetric(volumes.pairsPerSec/bare.pairsPerSec, "bare-csi-ratio")
		b.ReportMetric(bare.pairsPerSec/dirs.pairsPerSec, "bare-csi-mkdir-ratio")
		b.ReportMetric(volumes.pairsPerSec/kernel.pairsPerSec, "ratio")
		b.ReportMetric(volumes.pairsPerSec/dirs.pairsPerSec, "mkdir-ratio")
		b.ReportMetric(volumes.pairsPerSec/syncing.pairsPerSec, "sync-ratio")
	}
	b.ReportMetric(flushes, "flushes/pair")
	// The share of the run's wall time the store spent in commits and the
	// plugin in its journal's writes: near 1, that one bounds the run.
	b.ReportMetric(storeBusy.Seconds()*volumes.pairsPerSec/float64(b.N), "store-busy")
	b.ReportMetric(journalBusy.Seconds()*volumes.pairsPerSec/float64(b.N), "journal-busy")
	b.ReportMetric(float64(writes.applies.Load())/float64(b.N), "record-writes/pair")
	b.ReportMetric(float64(commits)/float64(b.N), "store-commits/pair")
	b.ReportMetric(float64(syncs)/float64(b.N), "plugin-syncs/pair")
	// The waits for a CPU, per pair: the process's threads waiting in the
	// kernel's run queue (other processes held the cores), and goroutines
	// runnable but waiting for one of GOMAXPROCS threads.
	b.ReportMetric(float64(runqueue.Microseconds())/float64(b.N), "os-runqueue-us/pair")
	b.ReportMetric(float64(runnable.Microseconds())/float64(b.N), "go-runnable-us/pair")
	b.ReportMetric(loadAverage(b), "load1")
}

// runqueueWait is the time this process's threads have waited in the
// kernel's run queue for a core (the second field of each thread's
// /proc/self/task/*/schedstat); threads that exited are not counted.
func runqueueWait(b *testing.B) time.Duration {
	stats, err := filepath.Glob("/proc/self/task/*/schedstat")
	require.NoError(b, err)
	var total int64
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the thread exited
		}
		if fields := strings.Fields(string(data)); len(fields) >= 2 {
			ns, err := strconv.ParseInt(fields[1], 10, 64)
			require.NoError(b, err)
			total += ns
		}
	}
	return time.Duration(total)
}

// runnableWait is the total time goroutines have spent runnable before
// running, from the runtime's /sched/latencies:seconds histogram (each
// bucket counted at its lower bound).
func runnableWait() time.Duration {
	sample := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(sample)
	h := sample[0].Value.Float64Histogram()
	var total float64
	for i, n := range h.Counts {
		if low := h.Buckets[i]; n > 0 && !math.IsInf(low, -1) {
			total += float64(n) * low
		}
	}
	return time.Duration(total * 1e9)
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
	cpu0 := cputime.Used()
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
	elapsed, cpu := time.Since(start), cputime.Used()-cpu0
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

// csiPair returns a bare CSI client's pair on volume i (external[i], the
// plugin's ID): NodeStageVolume, NodePublishVolume, NodeUnpublishVolume
// and NodeUnstageVolume through c, gRPC's generated client on a plain
// connection, with the staging directory and the target's parent made as
// the manager makes them, under dir. It keeps no record and takes no
// claim: the floor of any node manager driving this plugin, the plugin's
// own work and the four gRPC calls.
func csiPair(c csipb.NodeClient, dir string, external []string) func(i int) error {
	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	return func(i int) error {
		id := external[i]
		staging := filepath.Join(dir, "staging", strconv.Itoa(i))
		target := filepath.Join(dir, "per-alloc", strconv.Itoa(i), "target")
		if err := os.MkdirAll(staging, 0o700); err != nil {
			return err
		}
		if _, err := c.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: capability}); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return err
		}
		if _, err := c.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability}); err != nil {
			return err
		}
		if _, err := c.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			return err
		}
		_, err := c.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		return err
	}
}

// kernelWork is what a kernel pair does besides its four mount syscalls.
type kernelWork struct {
	// syncs is how many times the pair appends a line to the volume's own
	// file and fdatasyncs it, spread between the four syscalls as
	// plugvisor's waits are.
	syncs int
	// makeTarget makes the target directory before the publish bind
	// mount and removes it after its unmount, as CSI has the plugin do.
	makeTarget bool
}

// kernelPair prepares, under dir, count volume directories with a staging
// and a target directory each (no target with work.makeTarget), and
// returns the kernel's part of a pair on volume i: bind the volume on its
// staging path, bind that on its target, then unmount the target and the
// staging path, with work's extra steps.
func kernelPair(b *testing.B, dir string, count int, work kernelWork) func(i int) error {
	subs := []string{"volume", "staging", "target"}
	if work.makeTarget {
		subs = subs[:2]
	}
	files := make([]*os.File, count)
	for i := range count {
		for _, sub := range subs {
			require.NoError(b, os.MkdirAll(filepath.Join(dir, strconv.Itoa(i), sub), 0o750))
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(i), "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		require.NoError(b, err)
		files[i] = f
	}
	b.Cleanup(func() {
		for _, f := range files {
			require.NoError(b, f.Close())
		}
		require.NoError(b, hostpathtest.UnmountAll(b, dir))
	})
	line := []byte(strings.Repeat("x", 127) + "\n")
	return func(i int) error {
		vol, staging, target := filepath.Join(dir, strconv.Itoa(i), "volume"), filepath.Join(dir, strconv.Itoa(i), "staging"), filepath.Join(dir, strconv.Itoa(i), "target")
		publish := func() error { return syscall.Mount(staging, target, "", syscall.MS_BIND, "") }
		unpublish := func() error { return syscall.Unmount(target, 0) }
		if work.makeTarget {
			publish = func() error {
				if err := syscall.Mkdir(target, 0o750); err != nil {
					return err
				}
				return syscall.Mount(staging, target, "", syscall.MS_BIND, "")
			}
			unpublish = func() error {
				if err := syscall.Unmount(target, 0); err != nil {
					return err
				}
				return syscall.Rmdir(target)
			}
		}
		steps := []func() error{
			func() error { return syscall.Mount(vol, staging, "", syscall.MS_BIND, "") },
			publish,
			unpublish,
			func() error { return syscall.Unmount(staging, 0) },
		}
		synced := 0
		for k, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("volume %d, step %d: %w", i, k, err)
			}
			// The syncs due by the end of step k, of syncs spread evenly.
			for ; synced < work.syncs*(k+1)/len(steps); synced++ {
				if _, err := files[i].Write(line); err != nil {
					return err
				}
				if err := syscall.Fdatasync(int(files[i].Fd())); err != nil {
					return err
				}
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
