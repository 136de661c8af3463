package bench_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/plugvisor/plugvisor/actors/plugintype"
	"github.com/plugvisor/plugvisor/actors/probe"
	"github.com/plugvisor/plugvisor/bench"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/manager"
	"github.com/plugvisor/plugvisor/messages"
	"github.com/plugvisor/plugvisor/registry"
	"github.com/plugvisor/plugvisor/storage"
)

// The CSI side: the CSI manager (manager.Start) and its plugin instance
// actors, with 10,000 csi-node plugins registered. Nomad has no
// counterpart here: its csimanager does not run without a Nomad client
// around it, so these rows have no Nomad figure.

const (
	// csiFleet is how many plugins the CSI benchmarks run.
	csiFleet = 10000
	// csiFallbackFleet is the connected fleet when the open-file limit
	// cannot be raised for csiFleet connections.
	csiFallbackFleet = 1000
	// csiServeEnv, set to "<plugins>:<dir>", turns the test binary into
	// the plugin side of the connected benchmark (see TestMain).
	csiServeEnv = "PLUGVISOR_BENCH_CSI_SERVE"
	// csiResyncs is how many resyncs (and as many bare listings) are timed.
	csiResyncs = 30
	// csiWait bounds each wait of the CSI benchmarks.
	csiWait = 40 * time.Second
)

// TestMain serves CSI plugins when the binary is started as the plugin
// side of the connected CSI benchmark, and runs the tests otherwise.
func TestMain(m *testing.M) {
	if spec := os.Getenv(csiServeEnv); spec != "" {
		os.Exit(serveCSIChild(spec))
	}
	os.Exit(m.Run())
}

// serveCSIChild serves a healthy CSI plugin on the sockets of a share of
// a fleet, says "ready" on stdout once every socket listens, and stops
// when stdin closes (the benchmark's cleanup, or its end).
func serveCSIChild(spec string) int {
	var first, last int
	var dir string
	if n, err := fmt.Sscanf(spec, "%d:%d:%s", &first, &last, &dir); n != 3 || err != nil || first > last {
		fmt.Printf("error: %s=%q: want <first>:<last>:<dir>\n", csiServeEnv, spec)
		return 2
	}
	// A listening socket and an accepted connection per plugin.
	if _, err := bench.RaiseFileLimit(uint64(2*(last-first) + csiSpareFiles)); err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	server, err := bench.ServeCSI(dir, first, last)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	server.Stop()
	return 0
}

// csiSpareFiles is the open files a process needs besides its sockets.
const csiSpareFiles = 256

// csiConnectedFleet returns how many plugins the connected benchmark can
// run here: csiFleet when this process can have an open file per plugin
// (raising its soft limit if need be), csiFallbackFleet otherwise.
func csiConnectedFleet(b *testing.B) int {
	want := uint64(csiFleet + csiSpareFiles)
	limit, err := bench.RaiseFileLimit(want)
	if limit >= want {
		return csiFleet
	}
	b.Logf("open-file limit %d (%v): the connected fleet is %d plugins, not %d", limit, err, csiFallbackFleet, csiFleet)
	return csiFallbackFleet
}

// startCSIServers serves plugins sockets in dir from child processes
// (this test binary, see TestMain), as many as the open-file limit needs:
// each child can raise its soft limit to the hard one and needs two files
// per plugin. They stop in tb's cleanup.
func startCSIServers(tb testing.TB, dir string, plugins int) {
	tb.Helper()
	_, hard, err := bench.FileLimits()
	if err != nil {
		tb.Fatal(err)
	}
	perChild := int(min(hard, 1<<30)-csiSpareFiles) / 2
	if perChild < 1 {
		tb.Fatalf("open-file hard limit %d: too low to serve CSI plugins", hard)
	}
	children := (plugins + perChild - 1) / perChild
	share := (plugins + children - 1) / children // the same share each
	for first := 0; first < plugins; first += share {
		startCSIServer(tb, fmt.Sprintf("%d:%d:%s", first, min(first+share, plugins), dir))
	}
}

// startCSIServer starts this test binary as a plugin side serving spec
// (see serveCSIChild), waits until it is ready, and stops it in tb's
// cleanup.
func startCSIServer(tb testing.TB, spec string) {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), csiServeEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan error, 1)
	tb.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill() // our own child, by its PID
			<-exited
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			tb.Fatalf("CSI plugin process %s: %q", spec, line)
		}
	case <-time.After(csiWait):
		tb.Fatalf("CSI plugin process %s: not ready after %v", spec, csiWait)
	}
}

// csiFleetSetup is a registry holding plugins csi-node plugins, "p0" to
// "p<plugins-1>", alloc "a", on the sockets bench.CSISocket(dir, i), in an
// actor system of its own.
type csiFleetSetup struct {
	system   *actor.ActorSystem
	registry *registry.Registry
	dir      string
	plugins  int
}

func newCSIFleet(b testing.TB, plugins int) *csiFleetSetup {
	b.Helper()
	// A short directory: socket paths must fit sun_path (107 bytes).
	dir, err := os.MkdirTemp("", "pvb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	system := probe.NewSystem(b)
	bucket, err := storage.NewMemory().Bucket(registry.BucketName)
	if err != nil {
		b.Fatal(err)
	}
	reg, err := registry.New(system, registry.Config{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = reg.Shutdown() })
	f := &csiFleetSetup{system: system, registry: reg, dir: dir, plugins: plugins}
	// Registered from a few goroutines: setup, not measured.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < plugins; i += 4 {
				err := reg.RegisterPlugin(&messages.PluginInfo{Type: csi.TypeNode, Name: fmt.Sprintf("p%d", i), AllocId: "a",
					Connection: &messages.ConnectionInfo{SocketPath: bench.CSISocket(dir, i)}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if n := len(reg.Snapshot().List(csi.TypeNode)); n != plugins {
		b.Fatalf("registry lists %d csi-node plugins, want %d", n, plugins)
	}
	return f
}

// fleetCounter is an actor subscribed to the CSI manager (with a replay,
// so nothing recorded before it subscribed is missed) that closes done
// once every plugin of the fleet has a fingerprint that counts: healthy
// ones only when healthy is set, any otherwise (the first fingerprint).
type fleetCounter struct {
	healthy bool
	seen    []bool
	left    atomic.Int64 // read by the benchmark when it gives up
	done    chan struct{}
}

func (c *fleetCounter) Receive(ctx actor.Context) {
	ev, ok := ctx.Message().(*messages.CSIPluginFingerprinted)
	if !ok || c.left.Load() == 0 {
		return
	}
	fp := ev.GetFingerprint()
	if c.healthy && !fp.GetHealthy() {
		return
	}
	i, err := strconv.Atoi(strings.TrimPrefix(fp.GetName(), "p"))
	if err != nil || i < 0 || i >= len(c.seen) || c.seen[i] {
		return
	}
	c.seen[i] = true
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

type csiUsage struct {
	heap, stack int64
	goroutines  int
}

// csiMemory collects garbage until the figures settle, then reads the
// live heap, the goroutine stacks and the number of goroutines.
func csiMemory() csiUsage {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return csiUsage{heap: int64(m.HeapAlloc), stack: int64(m.StackInuse), goroutines: runtime.NumGoroutine()}
}

// BenchmarkCSIMemoryPerPlugin starts the CSI manager with a fleet of
// plugins registered and reports, for the same start:
//
//   - ms-until-current: from manager.Start until every plugin's instance
//     runs and the manager has recorded its first fingerprint (idle: the
//     first fingerprint, unhealthy, "socket ...: no such file or
//     directory"; connected: the first healthy one, after a dial and five
//     RPCs: GetPluginInfo, GetPluginCapabilities, NodeGetInfo, Probe,
//     NodeGetCapabilities);
//   - B/plugin (heap-B/plugin + stack-B/plugin) and goroutines/plugin:
//     what the manager and its instances hold per plugin once all are
//     current, after garbage collection; the registry's share is in the
//     heap before the start and not counted;
//   - resync-µs: a *plugintype.Resync against the 10,000 registered
//     plugins, nothing to correct. The manager handles its messages in
//     order, so a ListCSIPluginsRequest sent after the Resync is answered
//     once the resync is done: resync-µs is the median of csiResyncs
//     Resync + ListCSIPlugins round trips less the median of as many bare
//     ListCSIPlugins round trips (list-µs, reported too), interleaved.
//
// idle: the sockets do not exist, so no instance connects. connected: the
// plugin side (a gRPC server listening on every socket) runs in child
// processes, so none of its memory is counted: it needs two open files per
// plugin, so a hard limit of 20,000 takes two children. This process needs
// one per plugin: when its limit cannot be raised that far, connected runs
// csiFallbackFleet plugins and says so in its "plugins" figure.
//
// It does a fixed amount of work whatever b.N is (run it with -benchtime
// 1x): make bench-compare runs it in its one-off test process, as its name
// matches the Makefile's BENCH_COMPARE_ONCE.
//
// A fleet that is not all current within csiWait (a loaded machine) is
// torn down and measured again at a tenth of its size, down to
// csiSmallestFleet: the benchmark never fails the run for being slow. Its
// "plugins" figure says the size measured, and "cut-short" is 1 when the
// full size timed out.
func BenchmarkCSIMemoryPerPlugin(b *testing.B) {
	b.Run(fmt.Sprintf("plugins=%d/idle", csiFleet), func(b *testing.B) {
		fleetAtSize(b, csiFleet, false)
	})
	b.Run(fmt.Sprintf("plugins=%d/connected", csiFleet), func(b *testing.B) {
		fleetAtSize(b, csiConnectedFleet(b), true)
	})
}

// csiSmallestFleet is the smallest size fleetAtSize falls back to.
const csiSmallestFleet = 100

// errFleetTooSlow: not every instance of a fleet was current in time.
var errFleetTooSlow = errors.New("the fleet was not current in time")

// fleetAtSize runs benchCSIFleet at plugins, or smaller when a size times
// out, and reports the figures of the size that finished.
func fleetAtSize(b *testing.B, plugins int, connected bool) {
	for size := plugins; ; size /= 10 {
		got := map[string]float64{}
		s := &scope{TB: b}
		b.Cleanup(s.close)
		err := benchCSIFleet(s, size, connected, func(v float64, unit string) { got[unit] = v })
		s.close() // the next attempt measures from a clean slate
		if err == nil {
			for unit, v := range got {
				b.ReportMetric(v, unit)
			}
			if size < plugins {
				b.ReportMetric(1, "cut-short")
			}
			return
		}
		if size/10 < csiSmallestFleet {
			b.Logf("no figure: %v at every size down to %d plugins", err, size)
			return
		}
		b.Logf("%d plugins: %v; measuring %d instead", size, err, size/10)
	}
}

// scope runs the cleanups registered through it when close is called, so
// that an attempt is torn down before the next one starts.
type scope struct {
	testing.TB
	cleanups []func()
}

func (s *scope) Cleanup(fn func()) { s.cleanups = append(s.cleanups, fn) }

func (s *scope) close() {
	for len(s.cleanups) > 0 {
		last := s.cleanups[len(s.cleanups)-1]
		s.cleanups = s.cleanups[:len(s.cleanups)-1]
		last()
	}
}

// benchCSIFleet measures a fleet of plugins, idle or connected, and
// reports its figures to report (b.ReportMetric). It returns
// errFleetTooSlow when the fleet was not all current within csiWait, and
// fails b on any other trouble.
func benchCSIFleet(b testing.TB, plugins int, connected bool, report func(value float64, unit string)) error {
	f := newCSIFleet(b, plugins)
	if connected {
		startCSIServers(b, f.dir, plugins)
	}
	fingerprint := manager.FingerprintOptions{
		// One fingerprint each while measured: the next is 10 min away.
		Interval: 10 * time.Minute,
		// Idle instances wait that long too; a connected one whose dial
		// failed in the rush tries again soon.
		Retry:      map[bool]time.Duration{false: 10 * time.Minute, true: 200 * time.Millisecond}[connected],
		RPCTimeout: 30 * time.Second,
	}
	counter := &fleetCounter{healthy: connected, seen: make([]bool, plugins), done: make(chan struct{})}
	counter.left.Store(int64(plugins))
	before := csiMemory()

	start := time.Now()
	mgr, err := manager.Start(f.system, manager.Config{
		Registry:        f.registry,
		ResyncInterval:  time.Hour, // resyncs only when told
		ShutdownTimeout: 30 * time.Second,
		Fingerprint:     fingerprint,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 35*time.Second)
		defer cancel()
		if err := mgr.Shutdown(ctx); err != nil {
			b.Error(err)
		}
	})
	counterPID := f.system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return counter }))
	f.system.Root.Send(mgr.PID(), &messages.SubscribeCSI{Subscriber: counterPID, Replay: true})
	select {
	case <-counter.done:
	case <-time.After(csiWait):
		return fmt.Errorf("%w: after %v, %d of %d plugins still without a first fingerprint",
			errFleetTooSlow, csiWait, counter.left.Load(), plugins)
	}
	untilCurrent := time.Since(start)

	// The counter leaves before the memory is read; the manager drops it.
	if err := f.system.Root.StopFuture(counterPID).Wait(); err != nil {
		b.Fatal(err)
	}
	after := csiMemory()
	runtime.KeepAlive(counter) // its flags were in before's heap too

	list := func() time.Duration {
		t0 := time.Now()
		res, err := f.system.Root.RequestFuture(mgr.PID(), &messages.ListCSIPluginsRequest{}, csiWait).Result()
		if err != nil {
			b.Fatal(err)
		}
		if n := len(res.(*messages.ListCSIPluginsResponse).GetPlugins()); n != plugins {
			b.Fatalf("manager lists %d plugins, want %d", n, plugins)
		}
		return time.Since(t0)
	}
	list() // warm
	withResync := make([]time.Duration, 0, csiResyncs)
	bare := make([]time.Duration, 0, csiResyncs)
	for range csiResyncs {
		t0 := time.Now()
		f.system.Root.Send(mgr.PID(), &plugintype.Resync{})
		list()
		withResync = append(withResync, time.Since(t0))
		bare = append(bare, list())
	}
	for _, fp := range mgr.Plugins() {
		if fp.GetHealthy() != connected {
			b.Fatalf("after the resyncs %s/%s is %q, want healthy=%v", fp.GetType(), fp.GetName(), fp.GetHealthDescription(), connected)
		}
	}

	n := float64(plugins)
	heap, stack := float64(after.heap-before.heap)/n, float64(after.stack-before.stack)/n
	report(float64(untilCurrent.Microseconds())/1000, "ms-until-current")
	report(heap+stack, "B/plugin")
	report(heap, "heap-B/plugin")
	report(stack, "stack-B/plugin")
	report(float64(after.goroutines-before.goroutines)/n, "goroutines/plugin")
	report(median(withResync)-median(bare), "resync-µs")
	report(median(bare), "list-µs")
	report(n, "plugins")
	return nil
}

// median returns the median of ds in µs.
func median(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return float64(m.Nanoseconds()) / 1e3
}

// The CSI benchmark's harness is checked at a small size before it is
// trusted at 10,000: the plugin processes serve healthy plugins, and the
// benchmark sees every plugin current and reports each figure.
func TestCSIFleetBenchmarkAtASmallSize(t *testing.T) {
	for _, connected := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "connected"}[connected], func(t *testing.T) {
			got := map[string]float64{}
			require.NoError(t, benchCSIFleet(t, 50, connected, func(v float64, unit string) { got[unit] = v }))
			require.Equal(t, 50.0, got["plugins"])
			require.Positive(t, got["ms-until-current"])
			require.Positive(t, got["heap-B/plugin"])
			require.Positive(t, got["list-µs"])
			require.Contains(t, got, "resync-µs")
			if connected {
				require.GreaterOrEqual(t, got["goroutines/plugin"], 1.0, "each instance holds a gRPC connection")
			}
		})
	}
}

func TestCSIServerAnswersAsAHealthyNodePlugin(t *testing.T) {
	dir, err := os.MkdirTemp("", "pvb")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	server, err := bench.ServeCSI(dir, 0, 2)
	require.NoError(t, err)
	t.Cleanup(server.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 2 {
		c, err := csi.Dial(ctx, bench.CSISocket(dir, i), csi.Options{})
		require.NoError(t, err)
		ready, err := c.Probe(ctx)
		require.NoError(t, err)
		require.True(t, ready)
		info, err := c.NodeGetInfo(ctx)
		require.NoError(t, err)
		require.Equal(t, "bench-node", info.NodeID)
		require.NoError(t, c.Close())
	}
}
