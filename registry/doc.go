// Package registry is plugvisor's dynamic plugin registry. It holds the
// plugins running on a node, by type and name. Each plugin has its
// allocations, and the newest is current. The registry keeps them durable
// on disk and sends an event for every change.
//
// # Opening a registry
//
// Open opens the state file, an actor system and the registry; Close stops
// all three. New starts a registry on a storage.Bucket and an actor system
// that the embedder owns.
//
// # Calling it
//
// Go code calls the Registry's methods. They are Nomad's
// dynamicplugins.Registry methods. Interface lets a test substitute its
// own, and registrytest has stub dispensers.
//   - RegisterPlugin and DeregisterPlugin return once the change is durable.
//   - ListPlugins, PluginForAlloc, DispensePlugin and WaitForPlugin read the
//     latest durable state. They never wait for a write.
//   - Subscribe delivers one plugin type's events on a channel.
//
// Actors send messages.RegisterPlugin, messages.DeregisterPlugin and
// messages.Subscribe (or SubscribeInBatches) to PID instead. They never
// block.
//
// # What it promises
//
// Each promise has its test.
//   - A write is acknowledged only once it is durable. Its caller then
//     reads it.
//   - Each caller's writes apply in the order it sent them.
//   - Events reach each subscriber in sequence order, and none is lost
//     while the subscriber lives. A stuck subscriber slows nobody.
//   - Shutdown answers everything in flight.
//   - Every call ends by Config.RequestTimeout. A write ends within one and
//     a half times it.
//   - Bad input is an error wrapping ErrInvalid, and changes nothing.
//   - Sequence numbers never go backwards, across restarts too.
//
// How the actor keeps these promises is in ARCHITECTURE.md. The data
// structures of its state are in internal packages: the tables of
// allocations (internal/table), the fast check of a plain registration
// (internal/plain), the events handed out a few to an allocation
// (internal/slab) and the orders of recent deregistrations
// (internal/gone).
package registry
