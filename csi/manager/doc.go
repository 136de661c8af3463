// Package manager is the CSI manager: the actor that runs one supervised
// plugin instance actor for each current allocation of every
// csi-controller and csi-node plugin in the registry, the instance actor
// itself, and fingerprinting (what an instance asks its plugin, and how
// often).
//
//	m, err := manager.Start(system, manager.Config{Registry: reg})
//	plugins := m.Plugins() // each plugin's latest fingerprints and health
//
// From then on every CSI plugin registered gets an instance, supervised,
// fingerprinted and replaced by a newer allocation. Whoever listens (the
// catalog, the API's event stream) subscribes to the fingerprints by PID
// with messages.SubscribeCSI: the manager imports none of them.
//
// What the manager and an instance own, take and send are in
// ARCHITECTURE.md ("CSI manager", "CSI plugin instance").
package manager
