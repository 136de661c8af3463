// Package actors is plugvisor's toolkit on top of protoactor-go.
//
// An embedder starts its actor system with NewSystem, so that protoactor's
// log lines reach its hclog logger, with message contents left out; gives
// its actors' props actor.WithReceiverMiddleware(PanicStack(logger)), so a
// panic's stack is logged; and asks an actor from plain Go with Ask,
// without a protoactor Future. NewSlogHandler is the bridge for a library
// that logs through log/slog. Tests use the probes of actors/probe.
package actors
