// Package fleet is the cluster-wide CSI catalog in etcd: the volumes with
// their claims and attachments, every node's liveness and plugin
// fingerprints, from which the plugins' health counts over the live nodes
// follow.
//
//	s, err := fleet.Open(ctx, fleet.Config{Endpoints: eps, NodeID: "n1"})
//	cat, err := catalog.Start(system, catalog.Config{Fleet: s, ...})
//
// A [Store] is a model.Fleet and a plain type, safe for concurrent use:
// etcd decides, by transactions, and the Store keeps in memory only this
// node's own fingerprints, to put them again under a new lease. A node
// whose lease expired is down; [GC] frees its claims after a grace, each
// node's [Detacher] detaches what no claim holds, and a [Compactor] keeps
// etcd's history bounded; [SaveSnapshot] and [Defragment] are an
// operator's (docs/fleet-operations.md). When etcd does not answer within
// the request timeout, every call fails with an error matching
// model.ErrFleetUnavailable; nothing is answered from memory.
//
// The key layout and its transactions are in ARCHITECTURE.md ("Fleet
// store").
package fleet
