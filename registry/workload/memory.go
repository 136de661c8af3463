package workload

import (
	"fmt"
	"runtime"
	"testing"
)

// MemoryPerPlugin registers plugins plugins, one allocation each, and
// reports the heap the target holds for them, per plugin, after garbage
// collection. It does the work once whatever b.N is: run it with
// -benchtime=1x.
func MemoryPerPlugin(b *testing.B, t Target, plugins int) {
	before := heapInUse()
	for i := range plugins {
		if !ok(b, t.Register(fmt.Sprint("p", i), "a0")) {
			return
		}
	}
	after := heapInUse()
	if n := t.List(); n != plugins {
		b.Errorf("listed %d plugins, want %d", n, plugins)
	}
	b.ReportMetric(float64(int64(after)-int64(before))/float64(plugins), "B/plugin")
}

// heapInUse collects garbage until the figure settles, then returns the
// bytes of live heap objects.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
