// Package slab hands out the registry's events from arrays: one allocation
// for several events instead of one each.
package slab

// Len is how many values a Slab allocates at once.
const Len = 8

// Slab hands out zeroed values from arrays of Len. The events of a batch
// or more then cost one allocation, where one an event was a tenth of the
// registry's allocations.
//
// The caller fills a value once, before it shares it, and never writes it
// again. A value that someone keeps keeps the other values of its array
// alive too: at most Len - 1 more. The Slab keeps the array it hands out
// from alive until its next value.
//
// The zero Slab is ready to use. It is not safe for concurrent use.
type Slab[T any] struct{ free []T }

// Next returns a zeroed value that the Slab hands out once.
func (s *Slab[T]) Next() *T {
	if len(s.free) == 0 {
		s.free = make([]T, Len)
	}
	e := &s.free[0]
	s.free = s.free[1:]
	return e
}
