package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/messages"
)

// volumeCatalog is the CSI catalog as the volume manager's Catalog: the
// catalog's sentinels become the volume manager's, and a release carries
// its claim state to the catalog's past claims. Until the catalog keeps a
// plugin volume ID of its own, the external ID is the catalog ID.
type volumeCatalog struct {
	system  *actor.ActorSystem
	catalog *csi.Catalog
}

var _ volumes.Catalog = volumeCatalog{}

func (c volumeCatalog) GetVolume(ctx context.Context, namespace, id string) (*volumes.Volume, error) {
	v, err := c.catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return nil, catalogError(err)
	}
	out := &volumes.Volume{
		Namespace: v.Namespace, ID: v.ID, ExternalID: v.ID, PluginID: v.PluginID,
		AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode,
		Claims: map[string]catalog.ClaimMode{},
	}
	for _, claims := range []map[string]*catalog.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for alloc, claim := range maps.All(claims) {
			out.Claims[alloc] = claim.Mode
		}
	}
	return out, nil
}

func (c volumeCatalog) Claim(ctx context.Context, namespace, id, alloc string, mode catalog.ClaimMode) error {
	err := c.catalog.Claim(ctx, csi.ClaimRequest{
		Namespace: namespace, VolumeID: id, AllocID: alloc,
		Usage: csi.Usage{ReadOnly: mode == catalog.ClaimModeRead},
	})
	return catalogError(err)
}

func (c volumeCatalog) Release(ctx context.Context, r volumes.Release) error {
	answer, err := actors.Ask(ctx, c.system, c.catalog.PID(), func(replyTo *actor.PID) any {
		return &messages.ReleaseVolume{Namespace: r.Namespace, VolumeId: r.ID, AllocId: r.AllocID, State: string(r.State), ReplyTo: replyTo}
	})
	if err != nil {
		return fmt.Errorf("agent: release claim of alloc %s on volume %s/%s: %w", r.AllocID, r.Namespace, r.ID, err)
	}
	resp, ok := answer.(*messages.ReleaseVolumeResponse)
	if !ok {
		return fmt.Errorf("agent: release: unexpected answer %T", answer)
	}
	err = csi.CatalogErrorFromProto(resp.GetError())
	if errors.Is(err, csi.ErrVolumeNotFound) {
		return nil // an unknown volume holds no claim
	}
	return catalogError(err)
}

// catalogError adds the volume manager's sentinel to a catalog error.
func catalogError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, csi.ErrVolumeNotFound):
		return fmt.Errorf("%w: %w", volumes.ErrVolumeNotFound, err)
	case errors.Is(err, csi.ErrClaimRefused), errors.Is(err, csi.ErrVolumeInUse):
		return fmt.Errorf("%w: %w", volumes.ErrClaimRefused, err)
	case errors.Is(err, csi.ErrCatalogInvalid):
		return fmt.Errorf("%w: %w", volumes.ErrInvalid, err)
	}
	return err
}
