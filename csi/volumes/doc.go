// Package volumes is the volume manager: one actor per agent that mounts
// catalog volumes for allocs on this node, as kubelet and Nomad drive CSI.
//
//	m, err := volumes.Start(system, volumes.Config{
//		Bucket: records, Catalog: cat, Registry: reg, Root: root})
//	res, err := m.Mount(ctx, "default", "db", allocID, false) // res.TargetPath
//	err = m.Unmount(ctx, "default", "db", allocID)
//
// Mount claims the volume in the Catalog, then attaches, stages and
// publishes it through the plugins the registry knows; Unmount does the
// reverse and releases the claim. Every step is written to a durable record
// before and after its RPC, operations on one volume run one at a time,
// and at start the records are reconciled with the kernel's mount table.
// In a fleet, Config.Attachments records each attachment cluster-wide, and
// SetStanding fences the writers of a node that may have lost its lease.
// The facade (Manager) and the actor's messages (MountAllocVolume, ...)
// offer the same operations.
//
// What the actor owns, its lifecycle, the fence and what a restart keeps
// are in ARCHITECTURE.md ("Volume manager").
package volumes
