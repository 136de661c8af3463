// Package fleet is the cluster-wide CSI catalog in etcd: the volumes with
// their claims, every node's liveness and every node's plugin fingerprints,
// from which the plugins' health counts over the live nodes follow.
//
// State it owns: nothing in memory that decides anything. etcd decides; a
// [Store] is a plain type whose methods are safe for concurrent use, and
// correctness comes from etcd's transactions, not from memory. The only
// memory a Store keeps is this node's own fingerprints, so that it can put
// them again under a new lease after etcd lost the old one.
//
// Layout under the prefix (default DefaultPrefix), every value a protobuf
// record sealed with a CRC32C of its key and bytes (see record.go):
//   - volumes/<ns>/<id>: the volume with its claims (messages.CatalogVolume).
//     A claim or release reads it, applies the catalog's rules
//     (catalog.ClaimOn, catalog.ReleaseOn), and writes it back in a
//     transaction that compares its mod revision, retried a bounded number
//     of times on conflict: two writers cannot both win, whatever the
//     interleaving.
//   - pluginvolumes/<plugin>/<plugin volume ID>: the key of the volume
//     that holds the plugin volume, and volumecount/<shard>: the volumes
//     counted in each of 16 shards; both written in the volume's
//     transaction, so that a registration reads and guards a fixed number
//     of keys (index.go).
//   - nodes/<node>: the node's liveness, under the node's lease.
//   - fingerprints/<node>/<type>/<plugin>: the node's fingerprints
//     (messages.CSIFingerprint), under the same lease, each with a copy
//     under pluginfingerprints/<plugin>/<node>/<type>, which a volume's
//     read takes for its own plugin's health.
//   - claims/<node>/<ns>/<id> and attachments/<node>/<ns>/<id>: the node
//     index, empty values written in each volume's transaction, so that a
//     node's claims and attachments are found without reading every
//     volume (nodeindex.go).
//   - stranded/<node> and detaching/<ns>/<id>/<node>: a down node whose
//     attachments wait for a detach, and the guard of the node that
//     detaches one (stranded.go).
//   - elections/gc/ and elections/compactor/: the etcd elections of the
//     fleet-wide loops, [GC] and [Compactor] (leader.go).
//
// A node whose lease expired is down: its fingerprints vanish with the
// lease, so the health counts drop it, and its claims stay until they are
// released or [GC] frees them after a grace period; each node's
// [Detacher] then detaches what no claim holds. A [Compactor] keeps etcd's
// history bounded; [SaveSnapshot] and [Defragment] are an operator's
// backup and clean-up (docs/fleet-operations.md).
//
// When etcd does not answer within the request timeout, every call fails
// with an error matching catalog.ErrFleetUnavailable that names the
// endpoints; nothing is answered from memory.
//
// Imports: csi/catalog (the Fleet interface, the rules and the sentinels),
// csi/catalog/model, names, messages.
package fleet
