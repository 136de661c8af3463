package volumes_test

import (
	"errors"
	"flag"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
)

// TestRandomLifecyclesKeepTheInvariants runs random sequences of claim,
// mount, unmount, release, volume manager restart and plugin restart
// against the strict hostpath plugin and a model of what is mounted, and
// checks after every step that a single-writer volume never has two
// writers, that nothing is unstaged while published, that the records
// agree with the model and with the kernel's mount table, and that no
// mount is an orphan.
func TestRandomLifecyclesKeepTheInvariants(t *testing.T) {
	n := newNode(t, nil)
	p := newStrictPlugin(t, n, "hp")
	p.create(n, "sw", "hp", model.AccessModeSingleNodeWriter)
	p.create(n, "ro", "hp", model.AccessModeSingleNodeReader)
	vols := []string{"sw", "ro"}
	// Each run mounts for real and restarts bbolt and the plugin.
	rapidChecks(t, 20)
	allocs := []string{"a1", "a2", "a3"}

	rapid.Check(t, func(rt *rapid.T) {
		// mounted is the model: volume → alloc → read-only.
		clean(rt, n, vols, allocs) // a failed run may leave some behind while rapid shrinks
		mounted := map[string]map[string]bool{"sw": {}, "ro": {}}
		pick := func() (string, string) {
			return rapid.SampledFrom(vols).Draw(rt, "volume"), rapid.SampledFrom(allocs).Draw(rt, "alloc")
		}
		rt.Repeat(map[string]func(*rapid.T){
			"claim": func(rt *rapid.T) {
				vol, alloc := pick()
				err := n.manager.Claim(ctx, "", vol, alloc, rapid.Bool().Draw(rt, "read_only"))
				if err != nil && !errors.Is(err, volumes.ErrClaimRefused) {
					rt.Fatalf("claim: %v", err)
				}
			},
			"mount": func(rt *rapid.T) {
				vol, alloc := pick()
				ro := rapid.Bool().Draw(rt, "read_only")
				_, err := n.manager.Mount(ctx, "", vol, alloc, ro)
				if prev, ok := mounted[vol][alloc]; ok && prev == ro && err != nil {
					rt.Fatalf("mounting again what is mounted: %v", err)
				}
				switch {
				case err == nil:
					mounted[vol][alloc] = ro
				case errors.Is(err, volumes.ErrClaimRefused), errors.Is(err, volumes.ErrInUse):
				default:
					rt.Fatalf("mount: %v", err)
				}
			},
			"unmount": func(rt *rapid.T) {
				vol, alloc := pick()
				err := n.manager.Unmount(ctx, "", vol, alloc)
				if _, ok := mounted[vol][alloc]; ok {
					if err != nil {
						rt.Fatalf("unmount of a mount: %v", err)
					}
					delete(mounted[vol], alloc)
				} else if !errors.Is(err, volumes.ErrNotMounted) {
					rt.Fatalf("unmount without a mount: want ErrNotMounted, got %v", err)
				}
			},
			"release": func(rt *rapid.T) {
				vol, alloc := pick()
				err := n.manager.Release(ctx, "", vol, alloc)
				if _, ok := mounted[vol][alloc]; ok != errors.Is(err, volumes.ErrInUse) || (!ok && err != nil) {
					rt.Fatalf("release (mounted %t): %v", ok, err)
				}
			},
			"restart the volume manager": func(*rapid.T) { n.restart() },
			"restart the plugin":         func(*rapid.T) { p.restart() },
			"":                           func(rt *rapid.T) { checkInvariants(rt, n, p, mounted) },
		})
		clean(rt, n, vols, allocs)
		attached, published, violations := p.state()
		if len(attached)+len(published)+len(violations) > 0 || len(mountsUnder(t, n.root)) > 0 {
			rt.Fatalf("left behind: attached %v, published %v, violations %v, mounts %v", attached, published, violations, mountsUnder(t, n.root))
		}
	})
	require.Empty(t, mountsUnder(t, n.root))
}

// rapidChecks makes the test's rapid.Check run n times, unless
// -rapid.checks asks for another number.
func rapidChecks(t *testing.T, n int) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(n)))
		t.Cleanup(func() { _ = flag.Set("rapid.checks", f.DefValue) })
	}
}

// clean unmounts every mount of vols and releases every claim of allocs.
func clean(rt *rapid.T, n *node, vols, allocs []string) {
	for _, vol := range vols {
		st, err := n.manager.Status(ctx, "", vol)
		if err != nil {
			rt.Fatalf("status: %v", err)
		}
		for _, alloc := range slices.Sorted(maps.Keys(st.Record.GetPublishes())) {
			if err := n.manager.Unmount(ctx, "", vol, alloc); err != nil {
				rt.Fatalf("unmount: %v", err)
			}
		}
		for _, alloc := range allocs {
			if err := n.manager.Release(ctx, "", vol, alloc); err != nil {
				rt.Fatalf("release: %v", err)
			}
		}
	}
}

// checkInvariants checks the node against the model after a step.
func checkInvariants(rt *rapid.T, n *node, p *strictPlugin, mounted map[string]map[string]bool) {
	checkNode(rt, n, p, mounted, func(vol string) (writers, readers []string) {
		writers, readers, _ = n.catalog.claims(vol)
		return writers, readers
	})
}

// checkNode checks a node against the model after a step: the claims of
// the node's allocs, by claims, and the records, against what the node
// has published, the kernel's mount table and the plugin's violations.
func checkNode(rt *rapid.T, n *node, p *strictPlugin, mounted map[string]map[string]bool,
	claims func(vol string) (writers, readers []string)) {
	mounts := map[string]bool{}
	for _, m := range mountsUnder(n.t, n.root) {
		mounts[m] = true
	}
	known := map[string]bool{}
	for vol, model := range mounted {
		st, err := n.manager.Status(ctx, "", vol)
		if err != nil {
			rt.Fatalf("status: %v", err)
		}
		rec := st.Record
		writers, readers := claims(vol)
		if vol == "sw" && len(writers) > 1 {
			rt.Fatalf("two writers on a single-node-writer volume: %v", writers)
		}
		got := map[string]bool{}
		rwPublishes := 0
		for alloc, pub := range rec.GetPublishes() {
			if pub.GetState() != "published" {
				rt.Fatalf("volume %s, alloc %s: left in state %s (%s)", vol, alloc, pub.GetState(), pub.GetLastError())
			}
			got[alloc] = pub.GetReadOnly()
			if !pub.GetReadOnly() {
				rwPublishes++
			}
			if !mounts[pub.GetTargetPath()] {
				rt.Fatalf("volume %s, alloc %s: published at %s, which the kernel does not have mounted", vol, alloc, pub.GetTargetPath())
			}
			known[pub.GetTargetPath()] = true
			if pub.GetReadOnly() && !slices.Contains(readers, alloc) ||
				!pub.GetReadOnly() && !slices.Contains(writers, alloc) {
				rt.Fatalf("volume %s, alloc %s: published without the claim of its mode", vol, alloc)
			}
		}
		if vol == "sw" && rwPublishes > 1 {
			rt.Fatalf("two read-write publishes of a single-node-writer volume")
		}
		if !maps.Equal(got, model) {
			rt.Fatalf("volume %s: records say %v, the model %v", vol, got, model)
		}
		if len(got) > 0 && rec.GetStage().GetState() != "staged" {
			rt.Fatalf("volume %s: published but the stage is %q", vol, rec.GetStage().GetState())
		}
		if s := rec.GetStage(); s != nil {
			known[s.GetStagingPath()] = true
		}
	}
	for m := range mounts {
		if !known[m] && !strings.HasSuffix(m, "/hp") {
			rt.Fatalf("orphan mount %s", m)
		}
	}
	if _, _, violations := p.state(); len(violations) > 0 {
		rt.Fatalf("the plugin saw: %v", violations)
	}
}
