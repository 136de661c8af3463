// Package member is this node's place in the protoactor cluster of a fleet
// of agents: membership kept in etcd under a lease of configurable TTL (a
// cluster.ClusterProvider of our own), disthash identity lookup, the remote
// bound to one given address (TLS when configured), and the "volume" grain
// that serialises the claims of one volume.
//
// State: a Member owns its actor system, its remote, its etcd lease and its
// grains; the volumes themselves live in etcd (package fleet). A grain
// keeps its volume's record as last written or read (fleet.VolumeCache)
// but never trusts it: every write is guarded on the record's mod revision
// in etcd, so a write by anyone else since, another activation of the same
// volume during a topology change included, makes the guard fail and the
// change start again from what etcd holds.
package member
