// Package registry is plugvisor's dynamic plugin registry: the plugins
// running on a node, by type and name, each with its allocations (the
// newest is current), kept durable on disk, with an event for every
// change.
//
// An embedder opens one with Open, which opens the state file, an actor
// system and the registry, all stopped by Close; or with New, on a
// storage.Bucket and an actor system it owns. Go code then calls the
// Registry's methods, which are Nomad's dynamicplugins.Registry methods
// (Interface, to substitute in tests; registrytest has stub dispensers):
// RegisterPlugin and DeregisterPlugin return once the change is durable;
// ListPlugins, PluginForAlloc, DispensePlugin and WaitForPlugin read the
// latest durable state and never wait for a write; Subscribe delivers one
// plugin type's events on a channel. Actors send messages.RegisterPlugin,
// messages.DeregisterPlugin and messages.Subscribe (or SubscribeInBatches)
// to PID instead, and never block.
//
// What it promises, each with its test: a write is acknowledged only once
// durable, and its caller then reads it; each caller's writes apply in the
// order it sent them; events reach each subscriber in sequence order, none
// lost while it lives, and a stuck subscriber slows nobody; Shutdown
// answers everything in flight; every call ends by Config.RequestTimeout
// (a write within one and a half times it); bad input is an error
// wrapping ErrInvalid and changes nothing; sequence numbers never go
// backwards, across restarts too. How the actor keeps these promises is
// in ARCHITECTURE.md.
package registry
