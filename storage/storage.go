// Package storage is the durable key/value store that the registry actor and
// the CSI catalog actor share: one file per agent, one bucket per owner.
//
// An embedder opens one file with OpenBolt and gives each owner a bucket of
// its own (Bucket): registry.BucketName to the registry, others to its own
// records; Close releases the file's lock. registry.Open does all of this
// for a registry alone. NewMemory is the store of tests.
//
// The owners call it off their own goroutines, one batch at a time, and
// acknowledge a change only after Apply has returned: Apply returns once the
// batch is on disk. Values are opaque bytes (the owners encode them with
// protobuf). Bolt stores each with a CRC32C of its bucket, key and value,
// checks every one when the file opens and again on Load, and reports a
// mismatch as ErrCorrupt; files written before checksums are upgraded when
// they open (see checksum.go). Owners report records they cannot decode or
// validate with CorruptRecord, so every bad record has the one remedy.
//
// Two implementations satisfy Store: Bolt, a bbolt file, for the agent, and
// Memory, for tests in other packages.
package storage

import (
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/plugvisor/plugvisor/errclass"
)

// Op is one change in a batch: Value nil deletes Key; any other Value,
// including an empty non-nil slice, is stored under Key. proto.Marshal of an
// empty message returns a non-nil empty slice, so it stores rather than
// deletes; use Put and Delete to say which is meant.
type Op struct {
	Key, Value []byte
}

// Put returns the Op that stores value under key. A nil value is stored as an
// empty value, never taken as a delete.
func Put(key, value []byte) Op {
	if value == nil {
		value = []byte{}
	}
	return Op{Key: key, Value: value}
}

// Delete returns the Op that removes key. Removing a missing key is not an
// error.
func Delete(key []byte) Op {
	return Op{Key: key}
}

// Bucket is one owner's durable records.
type Bucket interface {
	// Load calls fn for every record in key order. fn must not keep the
	// slices, change them, or call Apply or Close on the same store. An error
	// from fn stops the walk and Load returns it unchanged.
	Load(fn func(key, value []byte) error) error
	// Apply writes ops atomically and durably (fsync'd) before returning:
	// either every op is on disk or none is. Ops apply in order, so a later
	// op on the same key wins. An empty batch is a no-op. A batch with an
	// invalid op (an empty key, a key or value over the size limits) fails
	// with ErrInvalid and writes nothing. Apply does not keep ops after it
	// returns.
	Apply(ops []Op) error
}

// Store opens buckets and closes the file.
type Store interface {
	// Bucket returns the bucket called name; a bucket never written to loads
	// no records. Names are 1 to MaxBucketNameLen bytes with no NUL. Handles
	// for one name share its records.
	Bucket(name string) (Bucket, error)
	// Close releases the store; it waits for Apply and Load calls in
	// progress. Closing twice is not an error. After Close every call on the
	// store or its buckets returns ErrClosed.
	Close() error
}

// Limits on names, keys and values.
const (
	// MaxBucketNameLen is the longest bucket name, in bytes.
	MaxBucketNameLen = 64
	// MaxKeyLen is the longest key, in bytes (bbolt's limit).
	MaxKeyLen = bolt.MaxKeySize
	// MaxValueLen is the longest value, in bytes (bbolt's limit, less the
	// checksum Bolt stores with each value).
	MaxValueLen = bolt.MaxValueSize - sealLen
)

var (
	// ErrLocked means another process, or another open store in this one,
	// holds the file.
	ErrLocked = errclass.New(errclass.Unavailable, "state file is locked")
	// ErrCorrupt means the file's contents cannot be trusted: it does not
	// open, or it fails the consistency check run at open.
	ErrCorrupt = errclass.New(errclass.Corrupt, "state file is corrupt")
	// ErrClosed means the store was used after Close.
	ErrClosed = errclass.New(errclass.ShutDown, "store is closed")
	// ErrInvalid means a bucket name, key or value was refused; nothing was
	// changed.
	ErrInvalid = errclass.New(errclass.Invalid, "invalid input")
)

// validateBucketName checks the rules of Store.Bucket.
func validateBucketName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: bucket name must not be empty", ErrInvalid)
	case len(name) > MaxBucketNameLen:
		return fmt.Errorf("%w: bucket name %.20q... is %d bytes, longer than %d", ErrInvalid, name, len(name), MaxBucketNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: bucket name %q contains a NUL byte", ErrInvalid, name)
	}
	return nil
}

// validateOps checks every op of a batch before any of it is written.
func validateOps(bucket string, ops []Op) error {
	for i, op := range ops {
		switch {
		case len(op.Key) == 0:
			return fmt.Errorf("%w: bucket %q, op %d: key must not be empty", ErrInvalid, bucket, i)
		case len(op.Key) > MaxKeyLen:
			return fmt.Errorf("%w: bucket %q, op %d: key is %d bytes, longer than %d", ErrInvalid, bucket, i, len(op.Key), MaxKeyLen)
		case len(op.Value) > MaxValueLen:
			return fmt.Errorf("%w: bucket %q, op %d: value is %d bytes, longer than %d", ErrInvalid, bucket, i, len(op.Value), MaxValueLen)
		}
	}
	return nil
}
