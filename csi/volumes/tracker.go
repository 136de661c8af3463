package volumes

import (
	"slices"

	"github.com/plugvisor/plugvisor/csi"
)

// volumeRef names one volume of one node plugin: operations on it run one
// at a time.
type volumeRef struct {
	plugin, namespace, volumeID string
}

// allocUse is how one alloc uses a volume. published is false once an
// unmount has unpublished it without finishing, or when a failed mount
// left the volume staged for it.
type allocUse struct {
	usage     csi.Usage
	published bool
}

// volumeUsage is what the tracker knows of one volume.
type volumeUsage struct {
	allocs map[string]allocUse
	staged map[csi.Usage]bool
}

// usageTracker knows which allocs use which volume and how, and which
// usages of each volume are staged. It belongs to the volume manager actor.
type usageTracker struct {
	volumes map[volumeRef]*volumeUsage
}

func newUsageTracker() *usageTracker {
	return &usageTracker{volumes: map[volumeRef]*volumeUsage{}}
}

// use returns how alloc uses the volume, if it does.
func (t *usageTracker) use(key volumeRef, alloc string) (allocUse, bool) {
	v, ok := t.volumes[key]
	if !ok {
		return allocUse{}, false
	}
	u, ok := v.allocs[alloc]
	return u, ok
}

func (t *usageTracker) volume(key volumeRef) *volumeUsage {
	v, ok := t.volumes[key]
	if !ok {
		v = &volumeUsage{allocs: map[string]allocUse{}, staged: map[csi.Usage]bool{}}
		t.volumes[key] = v
	}
	return v
}

// set records how alloc uses the volume.
func (t *usageTracker) set(key volumeRef, alloc string, use allocUse) {
	t.volume(key).allocs[alloc] = use
}

// free forgets alloc's use of the volume.
func (t *usageTracker) free(key volumeRef, alloc string) {
	if v, ok := t.volumes[key]; ok {
		delete(v.allocs, alloc)
		t.gc(key)
	}
}

// users returns, sorted, the allocs that use the volume with usage u.
func (t *usageTracker) users(key volumeRef, u csi.Usage) []string {
	var out []string
	if v, ok := t.volumes[key]; ok {
		for alloc, use := range v.allocs {
			if use.usage == u {
				out = append(out, alloc)
			}
		}
	}
	slices.Sort(out)
	return out
}

// lastUser reports whether alloc is the only alloc using the volume with usage u.
func (t *usageTracker) lastUser(key volumeRef, alloc string, u csi.Usage) bool {
	return slices.Equal(t.users(key, u), []string{alloc})
}

// isStaged reports whether the volume is staged for usage u.
func (t *usageTracker) isStaged(key volumeRef, u csi.Usage) bool {
	v, ok := t.volumes[key]
	return ok && v.staged[u]
}

// setStaged records whether the volume is staged for usage u.
func (t *usageTracker) setStaged(key volumeRef, u csi.Usage, staged bool) {
	if staged {
		t.volume(key).staged[u] = true
		return
	}
	if v, ok := t.volumes[key]; ok {
		delete(v.staged, u)
		t.gc(key)
	}
}

// gc forgets a volume nobody uses and nothing stages.
func (t *usageTracker) gc(key volumeRef) {
	if v := t.volumes[key]; len(v.allocs) == 0 && len(v.staged) == 0 {
		delete(t.volumes, key)
	}
}
