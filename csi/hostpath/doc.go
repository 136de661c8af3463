// Package hostpath is plugvisor's reference CSI plugin: a volume is a
// directory <root>/volumes/<volume-id> on the local disk, and the plugin is
// as strict as the drivers of real disks, so that an orchestrator tested
// against it drives those correctly too.
//
//	d, err := hostpath.New(hostpath.Config{Root: root, NodeID: "n1"})
//	...
//	err = d.Serve(listener) // a unix socket; d.Stop() ends it
//
// Run is its command (plugvisor hostpath-csi, cmd/hostpath-csi). It serves
// the Identity, Controller and Node services (which of the last two depends
// on Mode), keeps its state under <root>/state (the controller's records in
// small JSON files, each node's in one append-only journal whose concurrent
// changes share one sync; nothing is acknowledged before it is on disk), so
// restarted plugins and controller and node processes sharing a root agree,
// and bind-mounts (root) or, with Config.SymlinkFallback, links. Secrets are
// never logged, returned or written. A Driver is safe for concurrent RPCs;
// those of one volume run one at a time.
//
// Its strict rules (every refusal, with its gRPC code, in both modes, and
// what Config.AttachRequired adds) are in docs/hostpath.md.
package hostpath
