// Package registry is plugvisor's dynamic plugin registry: one actor owns
// every plugin's allocations (type → name → allocations, newest current),
// keeps them durable in a storage.Bucket, and publishes each change as an
// event to its subscribers.
//
// State and its owner: the registry actor (plugins.go) is the only writer.
// Readers never go through it: they read the immutable Snapshot it
// publishes after every durable batch (state.go).
//
// The write path, from a Go caller of the facade (registry.go): the caller
// validates and encodes its command, leaves it in the shared inbox
// (inbox.go) and waits on a pooled reply channel; the first caller to find
// the inbox asleep wakes the actor with one message. The actor takes every
// waiting command, applies each to its working state, and writes them as
// one batch: one snapshot cut, one store transaction on its writer
// goroutine, then, once durable, one event message per subscriber that
// takes batches (subscribers.go) and an answer to each caller. Actors send
// their commands to the actor's PID instead; those batch the same way.
//
// The contracts, each with its test: one owner of the state; a write is
// acknowledged only once durable; a caller reads its own writes; each
// caller's commands apply in the order it sent them; events reach each
// subscriber in sequence order, and a stuck subscriber slows nobody;
// Shutdown answers everything in flight; every facade call ends by the
// request timeout; a bad command in a batch gets its error and the rest
// apply. Sequence numbers are durable: they never go backwards, across
// restarts too.
package registry
