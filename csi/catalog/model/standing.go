package model

// Standing is how sure a node of a fleet is that the fleet still counts
// its claims, from the age of its lease's last renewal: a node that cannot
// renew its lease must stop writing before the fleet's GC may free its
// claims and give its volumes to another node (see the volume manager's
// fence).
type Standing int

const (
	// StandingHeld: the lease was renewed within half its TTL (plus the
	// half second the etcd client may wait before it renews).
	StandingHeld Standing = iota
	// StandingAtRisk: no renewal for longer: etcd may be out of reach. New claims and mounts wait for the lease; the mounts stay.
	StandingAtRisk
	// StandingLost: no renewal for a whole TTL: the lease may have
	// expired, and once the GC's grace is over another node may be given
	// this node's volumes. Writers are fenced until the claims are checked.
	StandingLost
)

// String names the standing for logs and health.
func (s Standing) String() string {
	switch s {
	case StandingHeld:
		return "held"
	case StandingAtRisk:
		return "at risk"
	case StandingLost:
		return "lost"
	}
	return "unknown"
}
