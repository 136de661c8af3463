package fleet

import (
	"context"

	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// VolumeCache is what the one writer of a volume (its grain) keeps of the
// volume between two of its registrations, claims and releases: the record and its mod
// revision as the last one wrote or read them, with the fingerprints of
// the volume's plugin as read in the same transaction.
//
// A registration, claim or release that starts from it makes its change on the cached
// record and writes it in one round trip, guarded, as every write is, on
// the record's mod revision, and on the claim node's fingerprint and drain
// key. When someone else wrote meanwhile (the GC, a drain, the detacher,
// another activation of the grain), the guard fails, the same transaction
// reads the volume again, and the change is made again on what it read: a
// stale cache costs a round trip and can never let a write through. A
// refusal, or nothing to change, found on the cache is never answered from
// it: the volume is read again first.
//
// One change at a time may use a VolumeCache (a grain runs its requests
// one at a time). Its zero value is empty.
type VolumeCache struct {
	ns, id string
	st     *state
}

// take empties the cache and returns what it held of volume ns/id (nil
// when nothing).
func (c *VolumeCache) take(ns, id string) *state {
	if c == nil || c.st == nil || c.ns != ns || c.id != id {
		return nil
	}
	st := c.st
	c.st = nil
	return st
}

// keep puts st, the state of volume ns/id, in the cache (nil: nothing).
func (c *VolumeCache) keep(ns, id string, st *state) {
	if c == nil || st == nil || st.v == nil {
		return
	}
	kept := *st
	kept.v, kept.cached = st.v.Copy(), true
	c.ns, c.id, c.st = ns, id, &kept
}

// Cached is the Store as the one writer of a volume sees it through
// cache: its RegisterVolume, Claim and Release start from what cache holds (see
// VolumeCache); its other methods are the Store's.
func (s *Store) Cached(cache *VolumeCache) model.Fleet { return cachedStore{Store: s, cache: cache} }

// cachedStore is a Store whose claims and releases go through a cache.
type cachedStore struct {
	*Store
	cache *VolumeCache
}

// Claim is Store.Claim, from the cache.
func (c cachedStore) Claim(ctx context.Context, namespace, id string, claim *model.Claim) (*model.CSIVolume, error) {
	return c.claimVia(ctx, namespace, id, claim, c.cache)
}

// Release is Store.Release, from the cache.
func (c cachedStore) Release(ctx context.Context, namespace, id string, claim *model.Claim) (*model.CSIVolume, error) {
	return c.changeClaims(ctx, "release", namespace, id, claim, model.ReleaseOn, via{cache: c.cache})
}

// RegisterVolume is Store.RegisterVolume, from the cache.
func (c cachedStore) RegisterVolume(ctx context.Context, v *model.CSIVolume) (*model.CSIVolume, error) {
	return c.register(ctx, v, via{cache: c.cache})
}
