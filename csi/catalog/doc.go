// Package catalog is the CSI catalog of this node: the actor that owns the
// volumes with their claims and the plugins with their fingerprints and
// health counts, its durable store, its errors as they cross the wire, and
// its Go facade ([Catalog]). The rules themselves (claims, access modes,
// health counts) are the pure model in csi/catalog/model.
//
// An embedder starts it with StartCatalog, on its actor system and the CSI
// manager, and registers, claims and releases volumes through the Catalog
// facade; a claim is granted or refused by the volume's access mode and its
// plugin's health.
//
// State it owns: the working, the pending and the last durable state of
// the catalog (volumes, plugins, the index counter), the queue of writes
// waiting for the next batch and the batch in flight, and its shutdown.
// The records live in [CatalogBucket] of the agent's store.
//
// Messages it takes: RegisterVolume, DeregisterVolume, ClaimVolume and
// ReleaseVolume (answered once durable), ListVolumesRequest,
// GetVolumeRequest and ListCatalogPluginsRequest (answered at once from the
// last durable state), ShutdownCatalog, and CSIPluginFingerprinted from the
// CSI manager, to which it subscribes by PID (SubscribeCSI, with replay) and
// which it watches until it shuts down (the agent stops the catalog before
// the manager actor). It sends only answers.
//
// In cluster mode ([CatalogConfig].Fleet set) the actor defers volumes,
// claims and the plugin listing to the [Fleet], the cluster-wide catalog,
// and forwards this node's fingerprints to it (see cluster.go). The
// catalog's rules for one volume (RegisterOver, ClaimOn, ReleaseOn, ...)
// are exported as pure functions so that a Fleet decides as this actor does.
//
// [Catalog] is the volume manager's [csi.Claimer]: the volume manager
// reaches the catalog through that interface and never imports this
// package, nor does this package import the volume manager or the CSI
// manager.
//
// Imports: csi, csi/catalog/model, names (ID validation), storage,
// actors, messages.
package catalog
