package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/plugvisor/plugvisor/actors"
	"github.com/plugvisor/plugvisor/csi"
	"github.com/plugvisor/plugvisor/csi/catalog"
	"github.com/plugvisor/plugvisor/csi/catalog/model"
	"github.com/plugvisor/plugvisor/csi/volumes"
	"github.com/plugvisor/plugvisor/errclass"
	"github.com/plugvisor/plugvisor/messages"
)

// volumeCatalog is the CSI catalog as the volume manager's Catalog: the
// catalog's sentinels become the volume manager's, and a release carries
// its claim state to the catalog's past claims.
type volumeCatalog struct {
	system  *actor.ActorSystem
	catalog *catalog.Catalog
}

var _ volumes.Catalog = volumeCatalog{}

func (c volumeCatalog) GetVolume(ctx context.Context, namespace, id string) (*volumes.Volume, error) {
	v, err := c.catalog.GetVolume(ctx, namespace, id)
	if err != nil {
		return nil, catalogError(err)
	}
	out := &volumes.Volume{
		Namespace: v.Namespace, ID: v.ID, ExternalID: v.PluginVolumeID(), PluginID: v.PluginID,
		AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, Capabilities: v.Capabilities(),
		Context: maps.Clone(v.Context), Secrets: maps.Clone(map[string]string(v.Secrets)),
		Claims: map[string]model.Claim{},
	}
	if o := v.MountOptions; o != nil {
		out.FSType, out.MountFlags = o.FSType, slices.Clone(o.MountFlags)
	}
	for _, claims := range []map[string]*model.Claim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for alloc, claim := range claims {
			out.Claims[alloc] = *claim
		}
	}
	return out, nil
}

func (c volumeCatalog) Claim(ctx context.Context, namespace, id, alloc string, use csi.Usage) error {
	err := c.catalog.Claim(ctx, csi.ClaimRequest{Namespace: namespace, VolumeID: id, AllocID: alloc, Usage: use})
	return catalogError(err)
}

func (c volumeCatalog) Release(ctx context.Context, r volumes.Release) error {
	answer, err := actors.Ask(ctx, c.system, c.catalog.PID(), func(replyTo *actor.PID) any {
		return &messages.ReleaseVolume{Namespace: r.Namespace, VolumeId: r.ID, AllocId: r.AllocID, State: string(r.State), LastError: r.LastError, ReplyTo: replyTo}
	})
	if err != nil {
		return fmt.Errorf("release claim of alloc %s on volume %s/%s: %w", r.AllocID, r.Namespace, r.ID, err)
	}
	resp, ok := answer.(*messages.ReleaseVolumeResponse)
	if !ok {
		return fmt.Errorf("release: unexpected answer %T", answer)
	}
	err = messages.ErrorFromProto(resp.GetError())
	if errors.Is(err, catalog.ErrVolumeNotFound) {
		return nil // an unknown volume holds no claim
	}
	return catalogError(err)
}

// catalogError adds the volume manager's sentinel to a catalog error,
// whose text already says what happened.
func catalogError(err error) error {
	switch {
	case errors.Is(err, catalog.ErrVolumeNotFound):
		return errclass.Also(err, volumes.ErrVolumeNotFound)
	case errors.Is(err, csi.ErrClaimRefused), errors.Is(err, catalog.ErrVolumeInUse), errors.Is(err, catalog.ErrVolumeDeleting):
		return errclass.Also(err, volumes.ErrClaimRefused)
	case errors.Is(err, catalog.ErrCatalogInvalid):
		return errclass.Also(err, volumes.ErrInvalid)
	}
	return err
}

// VolumeCatalog is the catalog c as the volume manager's Catalog, as the
// agent wires them: for embedders and tests that start the parts
// themselves.
func VolumeCatalog(system *actor.ActorSystem, c *catalog.Catalog) volumes.Catalog {
	return volumeCatalog{system: system, catalog: c}
}

// volumeCatalog is the volume manager's Catalog: in cluster mode, with the
// fleet's attachments.
func (a *Agent) volumeCatalog() volumes.Catalog {
	if f := a.fleet(); f != nil {
		return FleetVolumeCatalog(a.system, a.catalog, f, a.cfg.NodeID)
	}
	return VolumeCatalog(a.system, a.catalog)
}
