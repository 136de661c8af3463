package volumes

import (
	"context"
	"fmt"
	"sync"

	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
)

// localNodeID is the node of every claim a LocalClaimer takes: they are
// all this agent's.
const localNodeID = "local"

// LocalClaimer is the default [Claimer]: it applies csi/catalog's claim
// rules to the claims of this agent. A volume takes the access and
// attachment modes of its first claim and keeps them until its last claim
// is released; a claim with other modes is refused, as are a write claim on
// a read-only access mode and a second writer on a single-writer one. It is
// safe for concurrent use.
type LocalClaimer struct {
	mu      sync.Mutex
	volumes map[localClaimKey]*model.CSIVolume
}

type localClaimKey struct{ namespace, volumeID string }

func localKey(r csi.ClaimRequest) localClaimKey { return localClaimKey{r.Namespace, r.VolumeID} }

// localClaim is r as a claim of the catalog model, in state.
func localClaim(r csi.ClaimRequest, state model.ClaimState) *model.Claim {
	return &model.Claim{AllocID: r.AllocID, NodeID: localNodeID, Mode: r.Mode(), State: state}
}

// NewLocalClaimer returns a LocalClaimer holding no claims.
func NewLocalClaimer() *LocalClaimer {
	return &LocalClaimer{volumes: map[localClaimKey]*model.CSIVolume{}}
}

// Claim grants req or says why not, wrapping ErrClaimRefused and the
// catalog's sentinel (model.ErrVolumeMaxClaims, ...). Claiming again what
// the alloc holds changes nothing.
func (c *LocalClaimer) Claim(_ context.Context, req csi.ClaimRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, known := c.volumes[localKey(req)]
	if !known {
		v = model.NewCSIVolume(req.VolumeID, 0)
		v.Namespace = req.Namespace
		v.PluginID = req.Plugin
		v.AccessMode = req.Usage.AccessMode
		v.AttachmentMode = req.Usage.AttachmentMode
		v.Schedulable = true
	} else if v.PluginID != req.Plugin || v.AccessMode != req.Usage.AccessMode || v.AttachmentMode != req.Usage.AttachmentMode {
		return fmt.Errorf("csi: %w: volume %q in namespace %q is in use through plugin %q as %s %s; alloc %s asked for it through plugin %q as %s %s",
			csi.ErrClaimRefused, req.VolumeID, req.Namespace, v.PluginID, v.AttachmentMode, v.AccessMode,
			req.AllocID, req.Plugin, req.Usage.AttachmentMode, req.Usage.AccessMode)
	}
	if err := v.Claim(localClaim(req, model.ClaimStateTaken)); err != nil {
		return fmt.Errorf("csi: %w: alloc %s: %w", csi.ErrClaimRefused, req.AllocID, err)
	}
	c.volumes[localKey(req)] = v
	return nil
}

// Release frees the claim of req's alloc; releasing a claim that is not
// held changes nothing. The volume is forgotten with its last claim.
func (c *LocalClaimer) Release(_ context.Context, req csi.ClaimRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.volumes[localKey(req)]
	if !ok {
		return nil
	}
	if err := v.ClaimRelease(localClaim(req, model.ClaimStateReadyToFree)); err != nil {
		return fmt.Errorf("csi: release claim of alloc %s on volume %q in namespace %q: %w", req.AllocID, req.VolumeID, req.Namespace, err)
	}
	if !v.InUse() {
		delete(c.volumes, localKey(req))
	}
	return nil
}
