// Package catalog is the CSI catalog of this node: the actor that owns the
// volumes with their claims and the plugins with their fingerprints and
// health counts, its durable store, and its Go facade ([Catalog]). The
// rules themselves are the pure model in csi/catalog/model.
//
//	cat, err := catalog.Start(system, catalog.Config{
//		Bucket: bucket, NodeID: "n1", Manager: csiManager.PID()})
//	_, err = cat.RegisterVolume(ctx, vol)
//	err = cat.Claim(ctx, csi.ClaimRequest{VolumeID: "db", AllocID: "a1"})
//
// A claim is granted or refused by the volume's access mode and its
// plugin's health; every write is answered once durable, every read from
// the last durable state. [Catalog] satisfies the volume manager's Catalog
// interface as it is. In cluster mode ([Config].Fleet set) the actor
// defers volumes, claims and the plugin listing to the [model.Fleet] and
// forwards this node's fingerprints to it; the rules for one volume
// (model.RegisterOver, model.ClaimOn, model.ReleaseOn, ...) live in the
// model, so that a Fleet decides as this actor does.
//
// What the actor owns, takes and sends, and how it batches its writes, are
// in ARCHITECTURE.md ("Catalog").
package catalog
