package registry_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
	"github.com/plugvisor/plugvisor/storage/storagetest"
)

func openBolt(t *testing.T, path string) (*storage.Bolt, storage.Bucket) {
	t.Helper()
	db, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.NoError(t, err)
	bucket, err := db.Bucket(registry.BucketName)
	require.NoError(t, err)
	return db, bucket
}

func TestBoltStateSurvivesARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	system := probe.NewSystem(t)

	db, bucket := openBolt(t, path)
	first := start(t, system, bucket, echoDispensers())
	require.NoError(t, first.RegisterPlugin(plugin(0)))
	require.NoError(t, first.RegisterPlugin(plugin(1)))
	require.NoError(t, first.RegisterPlugin(pluginNamed("other", 2)))
	require.NoError(t, first.DeregisterPlugin(csiNode, "other", "alloc-2"))
	require.NoError(t, first.Shutdown())
	require.NoError(t, db.Close())

	db, bucket = openBolt(t, path)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	p := probe.New(t, system)
	second := start(t, system, bucket, echoDispensers())
	ack := subscribe(t, second, p, csiNode, true)
	require.Equal(t, []string{"alloc-1"}, allocIDs(ack.GetCurrent()), "restored plugins are replayed")
	p.ExpectNone(t, 0) // restoring emitted no events
	require.Equal(t, []string{"alloc-1", "alloc-0"}, allocIDs(second.Snapshot().Allocations(csiNode, "my-plugin")))
	require.Empty(t, second.Snapshot().Allocations(csiNode, "other"))

	require.NoError(t, second.RegisterPlugin(plugin(0)), "an old alloc re-registering after restore")
	require.Equal(t, "alloc-1", dispense(t, second).GetAllocId())
	require.NoError(t, second.RegisterPlugin(plugin(3)))
	require.Equal(t, "alloc-3", dispense(t, second).GetAllocId(), "a new alloc after restore is newest")
}

func TestACorruptRecordStopsTheStart(t *testing.T) {
	system := probe.NewSystem(t)
	cases := []struct {
		name string
		key  string
		val  []byte
		want string
	}{
		{"bytes that are not protobuf", "csi-node\x00x\x00a", []byte{0xff, 0xff, 0xff}, "does not decode"},
		{"a record that fails validation", "csi-node\x00x\x00a", mustMarshal(t, &messages.StoredAllocation{
			Plugin: &messages.PluginInfo{Type: "csi-node", Name: "x", AllocId: "a"}}), "is invalid"},
		{"a record under the wrong key", "csi-node\x00y\x00a", mustMarshal(t, &messages.StoredAllocation{
			Plugin: pluginNamed("x", 1)}), "holds plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bucket := memoryBucket(t)
			require.NoError(t, bucket.Apply([]storage.Op{storage.Put([]byte(tc.key), tc.val)}))
			_, err := registry.New(system, registry.Config{Bucket: bucket})
			require.ErrorIs(t, err, storage.ErrCorrupt, "a record the registry cannot use is corruption")
			require.ErrorContains(t, err, `bucket "registry.allocations", record`, "the error names the record")
			require.ErrorContains(t, err, "the record")
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "-reset-corrupt-state", "the error names the remedy")
		})
	}
}

func TestACorruptStateFileIsAClearErrorAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	require.NoError(t, os.WriteFile(path, []byte("this is not a bbolt file, not at all, no pages here"), 0o600))
	_, err := storage.OpenBolt(path, storage.BoltOptions{})
	require.ErrorIs(t, err, storage.ErrCorrupt)

	db, err := storage.OpenBolt(path, storage.BoltOptions{MoveAsideCorrupt: true})
	require.NoError(t, err, "moving the corrupt file aside is an explicit option")
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	bucket, err := db.Bucket(registry.BucketName)
	require.NoError(t, err)
	r := start(t, probe.NewSystem(t), bucket, nil)
	require.Empty(t, r.ListPlugins(""))
	aside, err := filepath.Glob(path + ".corrupt-*")
	require.NoError(t, err)
	require.Len(t, aside, 1, "the corrupt file is kept for inspection")
}

func TestAFailedWriteIsRefusedAndRolledBack(t *testing.T) {
	system := probe.NewSystem(t)
	bucket := &storagetest.FlakyBucket{Bucket: memoryBucket(t)}
	r := start(t, system, bucket, echoDispensers())
	p := probe.New(t, system)
	subscribe(t, r, p, csiNode, false)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	probe.Expect[*messages.PluginRegistered](t, p, timeout)

	bucket.Failing.Store(true)
	err := r.RegisterPlugin(plugin(1))
	require.ErrorIs(t, err, registry.ErrStore)
	require.ErrorContains(t, err, "no space left on device")
	require.ErrorIs(t, r.DeregisterPlugin(csiNode, "my-plugin", "alloc-0"), registry.ErrStore)
	p.ExpectNone(t, 20*time.Millisecond)
	require.Equal(t, "alloc-0", dispense(t, r).GetAllocId())

	bucket.Failing.Store(false)
	require.NoError(t, r.RegisterPlugin(plugin(2)))
	ev := probe.Expect[*messages.PluginRegistered](t, p, timeout)
	require.Equal(t, "alloc-0", ev.GetPrevious().GetAllocId(), "the refused alloc-1 left no trace")
	require.Equal(t, []string{"alloc-2", "alloc-0"}, allocIDs(r.Snapshot().Allocations(csiNode, "my-plugin")))
}

func TestConcurrentWritesShareTransactions(t *testing.T) {
	system := probe.NewSystem(t)
	counting := &countingBucket{Bucket: memoryBucket(t)}
	r := start(t, system, counting, nil)
	const writers, each = 32, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				require.NoError(t, r.RegisterPlugin(pluginNamed(fmt.Sprintf("w%d", w), i)))
			}
		})
	}
	wg.Wait()
	require.Len(t, r.ListPlugins(csiNode), writers)
	applies := counting.applies.Load()
	t.Logf("%d writes in %d transactions", writers*each, applies)
	require.Less(t, applies, int64(writers*each), "group commit puts concurrent writes in shared transactions")
}

type countingBucket struct {
	storage.Bucket
	applies atomic.Int64
}

func (b *countingBucket) Apply(ops []storage.Op) error {
	b.applies.Add(1)
	return b.Bucket.Apply(ops)
}

const crashEnv = "PLUGVISOR_REGISTRY_CRASH_CHILD"

// TestCrashChild is the child half of TestEveryAcknowledgedWriteSurvivesKill9:
// it registers plugins on a bbolt file and prints each one the registry
// acknowledged, until it is killed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("the child half of TestEveryAcknowledgedWriteSurvivesKill9; runs only as its subprocess")
	}
	system := probe.NewSystem(t)
	_, bucket := openBolt(t, path)
	r, err := registry.New(system, registry.Config{Bucket: bucket})
	require.NoError(t, err)
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				if r.RegisterPlugin(pluginNamed(name, i)) == nil {
					mu.Lock()
					fmt.Fprintln(out, name)
					out.Flush()
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

func TestEveryAcknowledgedWriteSurvivesKill9(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	child := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	child.Env = append(os.Environ(), crashEnv+"="+path)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	var acked []string
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && len(acked) < 500 {
		acked = append(acked, lines.Text())
	}
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	for lines.Scan() { // acknowledgements printed before the kill landed
		acked = append(acked, lines.Text())
	}
	_ = child.Wait()
	require.GreaterOrEqual(t, len(acked), 500)

	db, bucket := openBolt(t, path)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	r := start(t, probe.NewSystem(t), bucket, nil)
	snap := r.Snapshot()
	missing := 0
	for _, name := range acked {
		if _, ok := snap.Current(csiNode, name); !ok {
			missing++
		}
	}
	t.Logf("killed after %d acknowledged writes; %d plugins on disk after restart; %d acknowledged writes missing",
		len(acked), len(snap.List(csiNode)), missing)
	require.Zero(t, missing, "every acknowledged write is on disk")
	require.GreaterOrEqual(t, len(snap.List(csiNode)), len(acked))
}

func mustMarshal(t *testing.T, m *messages.StoredAllocation) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestARefusedReturnKeepsItsPlaceInTime: an allocation that comes back in a
// batch the store refuses keeps its place in time for its next return, so
// one registered after it first was stays current; and so do the writes
// queued behind the refused batch, which the registry applies again.
func TestARefusedReturnKeepsItsPlaceInTime(t *testing.T) {
	system := probe.NewSystem(t)
	bucket := &storagetest.FlakyBucket{Bucket: memoryBucket(t)}
	r := start(t, system, bucket, echoDispensers())
	bothGoneThenAlloc1Back(t, r)

	bucket.Failing.Store(true)
	require.ErrorIs(t, r.RegisterPlugin(plugin(0)), registry.ErrStore)
	bucket.Failing.Store(false)
	require.NoError(t, r.RegisterPlugin(plugin(0)))
	require.Equal(t, "alloc-1", dispense(t, r).GetAllocId(), "alloc-0 came back, and was registered before alloc-1")
}

// TestAReturnQueuedBehindARefusedBatchKeepsItsPlaceInTime: a return queued
// while a batch the store then refuses was being written is applied again
// after the rollback, with its place in time.
func TestAReturnQueuedBehindARefusedBatchKeepsItsPlaceInTime(t *testing.T) {
	system := probe.NewSystem(t)
	flaky := &storagetest.FlakyBucket{Bucket: memoryBucket(t)}
	bucket := &gatedBucket{Bucket: flaky, entered: make(chan struct{}, 8), gate: make(chan struct{}, 8)}
	for range 5 { // the setup's writes pass
		bucket.gate <- struct{}{}
	}
	r := start(t, system, bucket, echoDispensers())
	bothGoneThenAlloc1Back(t, r)
	for range 5 {
		<-bucket.entered
	}

	flaky.Failing.Store(true)
	refused := make(chan error, 1)
	go func() { refused <- r.RegisterPlugin(pluginNamed("other", 0)) }()
	<-bucket.entered // the batch that will be refused holds the store
	caller := probe.New(t, system)
	caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: plugin(0), ReplyTo: caller.PID()})
	// A command bad on its face is answered at once: once it is, the
	// return before it in the mailbox is applied and queued.
	caller.Send(r.PID(), &messages.RegisterPlugin{Plugin: pluginNamed("", 1), ReplyTo: caller.PID()})
	bad := probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout)
	require.ErrorIs(t, messages.ErrorFromProto(bad.GetError()), registry.ErrInvalid)
	bucket.gate <- struct{}{}
	require.ErrorIs(t, <-refused, registry.ErrStore)
	<-bucket.entered // alloc-0's return, applied again, in a batch of its own
	flaky.Failing.Store(false)
	bucket.gate <- struct{}{}
	back := probe.Expect[*messages.RegisterPluginResponse](t, caller, timeout)
	require.NoError(t, messages.ErrorFromProto(back.GetError()))
	require.Equal(t, "alloc-1", dispense(t, r).GetAllocId(), "alloc-0 came back, and was registered before alloc-1")
}

// bothGoneThenAlloc1Back registers alloc-0, then alloc-1 (current), of
// my-plugin, deregisters both and registers alloc-1 again: alloc-0's
// order, kept in the registry's memory of deregistrations, is older.
func bothGoneThenAlloc1Back(t *testing.T, r *registry.Registry) {
	t.Helper()
	for i := range 2 {
		require.NoError(t, r.RegisterPlugin(plugin(i)))
	}
	for i := range 2 {
		require.NoError(t, r.DeregisterPlugin(csiNode, "my-plugin", fmt.Sprint("alloc-", i)))
	}
	require.NoError(t, r.RegisterPlugin(plugin(1)))
}
