// Package manager is the CSI manager: the actor that runs one plugin
// instance actor for each current allocation of every csi-controller and
// csi-node plugin in the registry, the instance actor itself, and
// fingerprinting (what an instance asks its plugin, and how often).
//
// An embedder starts it with StartManager, on its actor system and
// registry: from then on every CSI plugin registered gets an instance,
// supervised, fingerprinted and replaced by a newer allocation. It reads
// the plugins' health with Manager.Plugins, or subscribes to their
// fingerprints with messages.SubscribeCSI, as the catalog does.
//
// State the manager owns: the instances it supervises (through
// actors/plugintype), each instance's last fingerprint and health, the
// listed fingerprints of current instances (published to [Manager.Plugins]
// as an immutable snapshot), its subscribers, and its shutdown. State an
// instance owns: its plugin's allocation, the plugin facts learnt once
// (info, capabilities, node info), its fingerprint cycle and its timer.
//
// Messages the manager takes: the registry's Subscribed, PluginRegistered,
// PluginUpdated and PluginDeregistered (it subscribes at start), the
// instances' CSIInstanceFingerprinted, ChildSupervised from its supervisor
// strategy, SubscribeCSI, ListCSIPluginsRequest and ShutdownCSIManager. It
// sends its subscribers CSIPluginFingerprinted, CSIPluginHealthChanged and
// CSIPluginFailed. An instance takes only its own timer and results, and
// sends CSIInstanceFingerprinted to the manager.
//
// Who listens (the catalog, the API's event stream) subscribes by PID with
// SubscribeCSI: the manager imports none of them.
//
// Imports: csi, registry, supervisor, actors, messages.
package manager
