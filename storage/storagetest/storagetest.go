// Package storagetest holds test doubles for the storage package's owners:
// a bucket whose writes fail on demand, to test what an owner does when its
// store fails, and the bits of a state file to flip, page kind by page kind,
// to test what a damaged file does to its opener.
package storagetest

import (
	"sync/atomic"

	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/storage"
)

// ErrNoSpace is what a FlakyBucket's Apply returns while it is failing.
var ErrNoSpace = errclass.New(errclass.Store, "no space left on device")

// FlakyBucket is a storage.Bucket whose Apply fails with ErrNoSpace, and
// writes nothing, while Failing is set: a disk that fills up. Load and, while
// Failing is not set, Apply go to the Bucket it wraps.
type FlakyBucket struct {
	storage.Bucket
	Failing atomic.Bool
}

// Apply fails with ErrNoSpace while b is failing, and applies ops otherwise.
func (b *FlakyBucket) Apply(ops []storage.Op) error {
	if b.Failing.Load() {
		return ErrNoSpace
	}
	return b.Bucket.Apply(ops)
}
