// Package actors is plugvisor's toolkit on top of protoactor-go.
//
// An embedder uses it in three ways:
//   - NewSystem starts its actor system. protoactor's log lines then reach
//     the embedder's hclog logger, with message contents left out.
//   - actor.WithReceiverMiddleware(PanicStack(logger)) on its actors' props
//     logs the stack of a panic.
//   - Ask asks an actor from plain Go, without a protoactor Future.
//
// NewSlogHandler is the bridge for a library that logs through log/slog.
// Tests use the probes of actors/probe.
package actors
