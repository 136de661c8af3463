// Package member is this node's place in the protoactor cluster of a fleet
// of agents: membership kept in etcd under a lease of configurable TTL (a
// cluster.ClusterProvider of our own), disthash identity lookup, the remote
// bound to one given address (TLS when configured), and the "volume" grain
// that serialises the claims of one volume.
//
// State: a Member owns its actor system, its remote, its etcd lease and its
// grains; the volumes themselves live in etcd (package fleet), and a grain
// reads them back there on every request, never trusting memory, because
// two activations of one volume can briefly coexist during a topology
// change.
package member
