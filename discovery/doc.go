// Package discovery finds plugins on disk and performs their activation
// handshakes, as Docker does.
//
//	d, err := discovery.Start(system, discovery.Config{
//		Dirs: discovery.DockerDirs(), Registry: reg})
//	plugins := d.Plugins() // what it found, and why each is not ready
//
// The discovery actor watches the socket and spec directories, activates
// what appears (the Docker handshake, else CSI's identity service), with
// retries that never give up for good, registers each plugin under the
// types its manifest names, and deregisters it when its file goes.
// Subscribers (messages.SubscribeDiscovery) hear of every change.
//
// Its building blocks are usable alone and own no state: Scan and Lookup
// find plugins (pure functions of the directories' contents), Activate
// posts /Plugin.Activate, TypesFor maps a manifest to plugin types, and
// Call makes any other Docker-protocol call; failures match sentinels
// (ErrTimeout, ErrUnreachable, ...) with errors.Is. The file formats,
// limits, TLS rules and where plugvisor differs from Docker are in
// docs/docker.md ("Discovery").
package discovery
