package storage

import (
	"bytes"
	"maps"
	"slices"
	"sync"
)

// Memory is a Store held in memory, for tests. It keeps the contract of Bolt
// (validation, ordering, ErrClosed) but nothing survives the process. Values
// are copied on write and on load, so no slice is shared with a caller.
type Memory struct {
	mu      sync.Mutex
	closed  bool
	buckets map[string]map[string][]byte
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{buckets: make(map[string]map[string][]byte)}
}

// Bucket returns the bucket called name. See Store.
func (m *Memory) Bucket(name string) (Bucket, error) {
	if err := validateBucketName(name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return &memoryBucket{store: m, name: name}, nil
}

// Close marks the store closed. It is safe to call more than once.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// memoryBucket is one bucket of a Memory store.
type memoryBucket struct {
	store *Memory
	name  string
}

// Load calls fn for a copy of every record, in key order, without holding the
// store's lock (fn may call Apply).
func (b *memoryBucket) Load(fn func(key, value []byte) error) error {
	b.store.mu.Lock()
	if b.store.closed {
		b.store.mu.Unlock()
		return ErrClosed
	}
	records := b.store.buckets[b.name]
	keys := slices.Sorted(maps.Keys(records))
	values := make([][]byte, len(keys))
	for i, k := range keys {
		values[i] = bytes.Clone(records[k])
	}
	b.store.mu.Unlock()

	for i, k := range keys {
		if err := fn([]byte(k), values[i]); err != nil {
			return err
		}
	}
	return nil
}

// Apply validates ops, then applies them all under the store's lock.
func (b *memoryBucket) Apply(ops []Op) error {
	if err := validateOps(b.name, ops); err != nil {
		return err
	}
	b.store.mu.Lock()
	defer b.store.mu.Unlock()
	if b.store.closed {
		return ErrClosed
	}
	records := b.store.buckets[b.name]
	if records == nil {
		records = make(map[string][]byte)
		b.store.buckets[b.name] = records
	}
	for _, op := range ops {
		if op.Value == nil {
			delete(records, string(op.Key))
			continue
		}
		// bytes.Clone keeps an empty value non-nil, so it stays a record.
		records[string(op.Key)] = bytes.Clone(op.Value)
	}
	return nil
}
