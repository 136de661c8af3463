package bench_test

import (
	"fmt"
	"testing"

	"github.com/plugvisor/plugvisor/registry/workload"
)

// scaleSizes are the registry sizes BenchmarkScale compares: a node's
// handful and far more than any node runs.
var scaleSizes = []int{100, 100000}

// BenchmarkScale: the registry filled with plugins plugins (one
// allocation each, filled once per size and side, both sides in memory),
// then a write followed by one DispensePlugin or one ListPlugins
// (workload.ReadAfterWrite), and a register + deregister pair on one of
// the plugins (workload.PairAmong), and a replacement: a new allocation of
// one of the plugins registered and the one it replaces deregistered, a
// change the registry keeps (workload.Replacements). A read that rebuilds
// anything per snapshot shows here as a cost that grows with the size.
func BenchmarkScale(b *testing.B) {
	for _, plugins := range scaleSizes {
		b.Run(fmt.Sprintf("plugins=%d", plugins), func(b *testing.B) {
			targets := map[string]workload.Target{}
			replacements := map[string]*workload.Replacements{}
			for _, im := range impls {
				t := im.memory(b)
				if err := workload.Populate(t, plugins); err != nil {
					b.Fatal(err)
				}
				targets[im.name] = t
				replacements[im.name] = workload.NewReplacements(plugins)
			}
			for _, read := range []string{"DispensePlugin", "ListPlugins"} {
				b.Run(read, func(b *testing.B) {
					each(b, func(b *testing.B, im impl) {
						workload.ReadAfterWrite(b, targets[im.name], plugins, read == "DispensePlugin")
					})
				})
			}
			b.Run("RegisterDeregister", func(b *testing.B) {
				each(b, func(b *testing.B, im impl) { workload.PairAmong(b, targets[im.name], plugins) })
			})
			b.Run("Replace", func(b *testing.B) {
				each(b, func(b *testing.B, im impl) { replacements[im.name].Run(b, targets[im.name]) })
			})
		})
	}
}
