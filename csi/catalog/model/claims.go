package model

import "github.com/plugvisor/plugvisor/names"

// Claim applies c to v: a claim in state taken goes to ClaimRead or
// ClaimWrite by its mode, any other state to ClaimRelease. On error v is
// unchanged.
func (v *CSIVolume) Claim(c *Claim) error {
	if err := v.checkClaimable(c); err != nil {
		return err
	}
	if c.State != ClaimStateTaken {
		return v.ClaimRelease(c)
	}
	if c.Mode == ClaimModeWrite {
		return v.ClaimWrite(c)
	}
	return v.ClaimRead(c)
}

// ClaimRead grants c, a read claim in state taken, to its alloc. Any access
// mode allows readers; the volume must be schedulable (ErrVolumeUnschedulable)
// and, for a single-node mode, not claimed on another node
// (ErrNodeConflict). Claiming again what the alloc already holds changes
// nothing. An alloc that holds a write claim gets ErrClaimModeConflict, one
// whose claim is being released ErrClaimReleasing. On error v is unchanged.
func (v *CSIVolume) ClaimRead(c *Claim) error {
	return v.take(c, ClaimModeRead, func(AccessMode) error { return v.readRefusal() })
}

// ClaimWrite grants c, a write claim in state taken, to its alloc, as
// ClaimRead does, and refuses it when the access mode is read-only
// (ErrWriteClaimRefused) or has no free writer slot (ErrVolumeMaxClaims). On
// error v is unchanged.
func (v *CSIVolume) ClaimWrite(c *Claim) error {
	return v.take(c, ClaimModeWrite, v.writeRefusal)
}

// take grants c, which must be a claim of the given mode in state taken,
// unless its capability, refusal or the claims already held say no. The
// claim granted carries the capability it chose.
func (v *CSIVolume) take(c *Claim, mode ClaimMode, refusal func(AccessMode) error) error {
	if err := v.checkClaimable(c); err != nil {
		return err
	}
	if c.Mode != mode || c.State != ClaimStateTaken {
		return errorf(ErrInvalidClaim, "claim by alloc %s is a %s claim in state %s, not a %s claim in state %s",
			c.AllocID, c.Mode, c.State, mode, ClaimStateTaken)
	}
	if held := v.heldClaim(c.AllocID); held != nil {
		if past, ok := v.PastClaims[c.AllocID]; ok {
			return v.errorf(ErrClaimReleasing, "is releasing the %s claim of alloc %s (%s): no new claim until it is freed",
				past.Mode, c.AllocID, past.State)
		}
		// Claiming again what is held changes nothing.
		return v.matchHeld(held, c)
	}
	c = c.Copy()
	if err := v.chooseCapability(c); err != nil {
		return err
	}
	if err := refusal(v.capabilityOf(c).AccessMode); err != nil {
		return err
	}
	if err := v.capabilityConflict(c); err != nil {
		return err
	}
	if err := v.nodeConflict(c); err != nil {
		return err
	}
	v.ensureMaps()
	if mode == ClaimModeWrite {
		v.WriteClaims[c.AllocID] = c.Copy()
	} else {
		v.ReadClaims[c.AllocID] = c.Copy()
	}
	return nil
}

// ClaimRelease moves the claim its alloc holds to c.State, which must not be
// taken; c must match the held claim's mode (ErrClaimModeConflict) and node
// (ErrInvalidClaim). A state on the way to being freed records c in
// PastClaims, and the alloc keeps its claim, its writer slot and its node
// until ClaimStateReadyToFree removes the claim altogether. Releasing with
// ClaimStateReadyToFree a claim that is not held changes nothing, so that
// freeing is idempotent; any other state needs a held claim
// (ErrClaimNotFound). On error v is unchanged.
func (v *CSIVolume) ClaimRelease(c *Claim) error {
	if err := v.checkClaimable(c); err != nil {
		return err
	}
	if c.State == ClaimStateTaken {
		return errorf(ErrInvalidClaim, "claim by alloc %s is in state %s; releasing needs another state",
			c.AllocID, c.State)
	}
	held := v.heldClaim(c.AllocID)
	if held == nil {
		if c.State == ClaimStateReadyToFree {
			return nil
		}
		return v.errorf(ErrClaimNotFound, "has no claim by alloc %s to move to %s", c.AllocID, c.State)
	}
	if err := v.matchHeld(held, c); err != nil {
		return err
	}
	if c.State == ClaimStateReadyToFree {
		v.GC(c.AllocID)
		return nil
	}
	v.ensureMaps()
	v.PastClaims[c.AllocID] = c.Copy()
	return nil
}

// GC removes every claim of allocID, held or past, and reports whether there
// was any: the alloc is gone and its claims with it.
func (v *CSIVolume) GC(allocID string) bool {
	found := false
	for _, m := range []map[string]*Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		if _, ok := m[allocID]; ok {
			delete(m, allocID)
			found = true
		}
	}
	return found
}

// checkClaimable checks that v can take claims at all (an ID, known modes)
// and that c is well formed.
func (v *CSIVolume) checkClaimable(c *Claim) error {
	if v == nil {
		return errorf(ErrInvalidVolume, "volume is nil")
	}
	if v.ID == "" {
		return errorf(ErrInvalidVolume, "volume with an empty ID cannot be claimed")
	}
	for _, err := range []error{names.Check("ID", v.ID), names.Check("namespace", v.Namespace), names.Check("plugin ID", v.PluginID)} {
		if err != nil {
			return errorf(ErrInvalidVolume, "volume cannot be claimed: %v", err)
		}
	}
	if err := v.AccessMode.check(); err != nil {
		return within(err, ErrInvalidVolume, "volume %q cannot be claimed", v.ID)
	}
	if err := v.AttachmentMode.check(); err != nil {
		return within(err, ErrInvalidVolume, "volume %q cannot be claimed", v.ID)
	}
	return c.check()
}

// matchHeld checks that c names the same mode and node as held, the claim
// its alloc holds.
func (v *CSIVolume) matchHeld(held, c *Claim) error {
	if held.Mode != c.Mode {
		return v.errorf(ErrClaimModeConflict, "has a %s claim by alloc %s, not a %s claim; release it first",
			held.Mode, c.AllocID, c.Mode)
	}
	if held.NodeID != c.NodeID {
		return v.errorf(ErrInvalidClaim, "has the claim of alloc %s on node %s, not on node %s",
			c.AllocID, held.NodeID, c.NodeID)
	}
	return nil
}

// nodeConflict refuses c when its capability or a held claim's is
// single-node and v is claimed on another node.
func (v *CSIVolume) nodeConflict(c *Claim) error {
	if !v.capabilityOf(c).AccessMode.SingleNode() && v.singleNodeHeld() == nil {
		return nil
	}
	for _, node := range v.claimNodes() {
		if node != c.NodeID {
			return v.errorf(ErrNodeConflict, "is claimed on node %s: claim by alloc %s on node %s refused",
				node, c.AllocID, c.NodeID)
		}
	}
	return nil
}
