// Package actors is plugvisor's runtime toolkit on top of protoactor-go:
// actor-system bootstrap with hclog as the logger, receive middleware that
// logs the stack of a panic, and (in actors/probe) the test probe that
// protoactor lacks at the version plugvisor uses.
package actors
